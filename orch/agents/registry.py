"""Agent adapters, chosen by short name."""

from __future__ import annotations

from collections.abc import Callable

from orch import settings
from orch.contracts import AgentAdapter, ImageInstall
from orch.errors import UsageError


def _claude() -> AgentAdapter:
    from orch.agents.claude import ClaudeAdapter

    return ClaudeAdapter()


def _gemini() -> AgentAdapter:
    from orch.agents.gemini import GeminiAdapter

    return GeminiAdapter()


def _scripted() -> AgentAdapter:
    from orch.agents.scripted import ScriptedAdapter

    return ScriptedAdapter()


ADAPTERS: dict[str, Callable[[], AgentAdapter]] = {"claude": _claude, "gemini": _gemini, "scripted": _scripted}
DEFAULT_AGENT = settings.AGENT.default
"""The agent of a run that names none (compose's ORCH_AGENT unset)."""
IMAGE_AGENT = "claude"
"""The agent CLI the worker image (docker/Dockerfile) installs; its adapter says which package and version."""


def get_adapter(name: str) -> AgentAdapter:
    try:
        factory = ADAPTERS[name]
    except KeyError:
        raise UsageError(f"unknown agent {name!r} (available: {', '.join(sorted(ADAPTERS))})") from None
    return factory()


def image_install() -> ImageInstall:
    install = get_adapter(IMAGE_AGENT).install
    assert install is not None, f"agent {IMAGE_AGENT} states no image install"
    return install

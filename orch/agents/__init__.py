"""Agent adapters, chosen by short name."""

from __future__ import annotations

from collections.abc import Callable

from orch.contracts import AgentAdapter
from orch.errors import UsageError


def _claude() -> AgentAdapter:
    from orch.agents.claude import ClaudeAdapter

    return ClaudeAdapter()


def _scripted() -> AgentAdapter:
    from orch.agents.scripted import ScriptedAdapter

    return ScriptedAdapter()


ADAPTERS: dict[str, Callable[[], AgentAdapter]] = {"claude": _claude, "scripted": _scripted}


def get_adapter(name: str) -> AgentAdapter:
    try:
        factory = ADAPTERS[name]
    except KeyError:
        raise UsageError(f"unknown agent {name!r} (available: {', '.join(sorted(ADAPTERS))})") from None
    return factory()

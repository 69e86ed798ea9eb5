"""Agent adapters, chosen by short name."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from orch import settings

# Re-exported: what every adapter checks, for callers outside orch.agents too (orch.fleet.launch).
from orch.agents.checks import check_permission_mode as check_permission_mode
from orch.contracts import AgentAdapter, ImageInstall
from orch.errors import UsageError


def _claude() -> AgentAdapter:
    from orch.agents.claude import ClaudeAdapter

    return ClaudeAdapter()


def _codex() -> AgentAdapter:
    from orch.agents.codex import CodexAdapter

    return CodexAdapter()


def _gemini() -> AgentAdapter:
    from orch.agents.gemini import GeminiAdapter

    return GeminiAdapter()


def _opencode() -> AgentAdapter:
    from orch.agents.opencode import OpencodeAdapter

    return OpencodeAdapter()


def _aider() -> AgentAdapter:
    from orch.agents.aider import AiderAdapter

    return AiderAdapter()


def _scripted() -> AgentAdapter:
    from orch.agents.scripted import ScriptedAdapter

    return ScriptedAdapter()


# Imported on first use: a run of one kind never loads the others' modules.
ADAPTERS: dict[str, Callable[[], AgentAdapter]] = {
    "claude": _claude,
    "codex": _codex,
    "gemini": _gemini,
    "opencode": _opencode,
    "aider": _aider,
    "scripted": _scripted,
}
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


ALL_AGENTS = "all"
"""`orch image build --agents all`: every agent the worker image can carry."""


def image_installs(agents: Sequence[str]) -> dict[str, ImageInstall]:
    """What the worker image installs for each of these agents beside its own (IMAGE_AGENT), by name
    (`all`: every agent whose adapter states an install); UsageError for an agent the image cannot carry."""
    names = [n for n in ADAPTERS if get_adapter(n).install is not None] if ALL_AGENTS in agents else agents
    out = {}
    for name in names:
        adapter = get_adapter(name)
        if name == IMAGE_AGENT or name == "scripted":  # always there: the image's own agent, and orch's
            continue
        if adapter.install is None:
            raise UsageError(f"the worker image cannot carry agent {name!r} yet", hint="run it with --local")
        out[name] = adapter.install
    return out

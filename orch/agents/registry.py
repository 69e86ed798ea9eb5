"""Agent adapters, chosen by short name."""

from __future__ import annotations

import importlib
from collections.abc import Sequence

# Re-exported: what every adapter checks, for callers outside orch.agents too (orch.fleet.launch).
from orch.agents.checks import check_permission_mode as check_permission_mode
from orch.contracts import AgentAdapter, ImageInstall
from orch.errors import UsageError
from orch.versions import DEFAULT_AGENT as DEFAULT_AGENT

ADAPTERS: dict[str, str | AgentAdapter] = {
    "claude": "orch.agents.claude:ClaudeAdapter",
    "codex": "orch.agents.codex.adapter:CodexAdapter",
    "gemini": "orch.agents.gemini:GeminiAdapter",
    "opencode": "orch.agents.opencode:OpencodeAdapter",
    "aider": "orch.agents.aider.adapter:AiderAdapter",
    "scripted": "orch.agents.scripted.adapter:ScriptedAdapter",
}
"""Every agent by name: `module:Class` (imported on first use, so a run of one kind never loads the others'
modules), or an adapter itself (a test's toy agent). Adding an agent is one line here."""
IMAGE_AGENT = "claude"
"""The agent CLI the worker image (docker/Dockerfile) installs; its adapter says which package and version."""


def _load(target: str) -> AgentAdapter:
    module, _, attr = target.partition(":")
    factory = getattr(importlib.import_module(module), attr)
    adapter = factory()
    if not isinstance(adapter, AgentAdapter):
        raise TypeError(f"{target} is not an AgentAdapter")
    return adapter


def get_adapter(name: str) -> AgentAdapter:
    try:
        target = ADAPTERS[name]
    except KeyError:
        raise UsageError(f"unknown agent {name!r} (available: {', '.join(sorted(ADAPTERS))})") from None
    return _load(target) if isinstance(target, str) else target


def image_install() -> ImageInstall:
    install = get_adapter(IMAGE_AGENT).facts.install
    assert install is not None, f"agent {IMAGE_AGENT} states no image install"
    return install


ALL_AGENTS = "all"
"""`orch image build --agents all`: every agent the worker image can carry."""


def image_installs(agents: Sequence[str]) -> dict[str, ImageInstall]:
    """What the worker image installs for each of these agents beside its own (IMAGE_AGENT), by name
    (`all`: every agent whose adapter states an install); UsageError for an agent the image cannot carry."""
    names = [n for n in ADAPTERS if get_adapter(n).facts.install is not None] if ALL_AGENTS in agents else agents
    out = {}
    for name in names:
        adapter = get_adapter(name)
        if name == IMAGE_AGENT or name == "scripted":  # always there: the image's own agent, and orch's
            continue
        if adapter.facts.install is None:
            raise UsageError(f"the worker image cannot carry agent {name!r} yet", hint="run it with --local")
        out[name] = adapter.facts.install
    return out


def project_files() -> tuple[str, ...]:
    """What any agent CLI orch runs reads from a folder as its configuration or instructions (each adapter's
    `project_files`, in registry order, each glob once)."""
    globs = [glob for name in ADAPTERS for glob in get_adapter(name).facts.project_files]
    return tuple(dict.fromkeys(globs))

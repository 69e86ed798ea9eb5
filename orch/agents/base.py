"""What every agent adapter shares: the behaviour its facts (orch.contracts.AgentFacts, one frozen object)
decide (AgentBase): finding the binary, asking its version, its `orch doctor` lines, the hook command line,
and the argv that starts or resumes a session. An adapter module states its facts and writes only what is
its own: seeding the config dir and the launch command (`launch`), and where it differs, an override."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import orch.run.hookwriter
from orch.agents.binaries import find_binary, version_of
from orch.agents.checks import check_permission_mode, credentials_check, install_check, limits_check
from orch.contracts import (
    AgentFacts,
    Check,
    LaunchSpec,
    WorkerContext,
)
from orch.run.folder import RunFolder
from orch.settings.compose import RUN
from orch.settings.internal import WORKER

HOOKWRITER = orch.run.hookwriter.__file__
"""The stdlib-only hook writer every agent's hooks run (with `-S`, standard library only: it starts fast)."""

HOOK_START = "import sys; sys.path[0] = {folder}; import hookwriter; sys.exit(hookwriter.main(sys.argv))"
"""How a hook command starts the hook writer: by importing it from its folder, not running it as a script.
Python compiles a script at every start (17.0 -> 14.7 ms of CPU a hook here) but loads an imported module from
its byte-compiled file, checked against the source as every import is (stale or missing: compiled from the
source). That file is orch/run/__pycache__, beside the source, which every orch process (the controller
included) already imports orch.run's modules from: whoever may write it could already change what they run.
sys.path[0] is the writer's folder, as for a script, so the standard library resolves as before."""


def hook_command(*args: str | Path) -> str:
    """A shell command line running the hook writer with this interpreter (`python -S -c HOOK_START ARGS...`:
    the writer's argv is `-c` then ARGS, as a script's is its path then ARGS)."""
    start = HOOK_START.format(folder=json.dumps(str(Path(HOOKWRITER).parent)))
    return shlex.join([sys.executable, "-S", "-c", start, *map(str, args)])


def write_config(path: Path, data: dict[str, Any]) -> None:
    """Write one of the agent's JSON config files in the worker's config dir, readable by its owner only."""
    path.write_text(json.dumps(data, indent=2) + "\n")
    path.chmod(0o600)


@dataclass(frozen=True)
class HookDialect:
    """How an agent's hooks differ from Claude Code's (whose event names orch's worker states read). The hook
    writer, a stdlib-only script in orch.run that knows no agent, gets it as one JSON argument (`dialect`)."""

    events: dict[str, str]
    """The agent's hook event names -> orch's."""
    notifications: dict[str, str] = field(default_factory=dict)
    """Its notification types -> orch's."""
    permission_notice: str = ""
    """The notification type saying its permission dialog is up (logged as an unanswered PermissionRequest)."""
    gate: str = ""
    """The event whose hook may deny a tool call (answered `{"decision": "deny", "reason": ...}`)."""
    dialog: str = ""
    """Its permission dialog's text, allow-once preselected: under an allow policy the hook writer presses
    Enter on it (for an agent whose hooks cannot approve)."""
    pane_socket: str = ""
    """Under strict isolation, the relay's socket for the worker's own pane (WorkerContext.pane_socket):
    how the hook writer reads the dialog and presses Enter there; empty: the run's tmux server ($TMUX_PANE)."""

    def command(self, *args: str | Path) -> str:
        """The hook command line for one of its hooks."""
        return hook_command("dialect", json.dumps(dataclasses.asdict(self), separators=(",", ":")), *args)


class AgentBase:
    """An adapter made of its facts: the AgentAdapter contract's shared behaviour. A subclass sets FACTS and
    writes `launch`; it overrides the rest only where its agent differs."""

    FACTS: ClassVar[AgentFacts]

    def __init__(self, facts: AgentFacts | None = None) -> None:
        self.facts = facts or type(self).FACTS

    def can_run_strict(self) -> bool:
        return self.facts.strict_isolation or self.facts.own_pane

    def binary(self) -> Path:
        facts = self.facts
        command = facts.command or facts.name
        return find_binary(facts.bin_setting, command, facts.cache_bin, facts.title, facts.how_to_install)

    def version(self) -> str | None:
        facts = self.facts
        env = dict(facts.version_env) or None
        return version_of(self.binary, env=env, last=facts.version_last, timeout=facts.version_timeout)

    def doctor(self) -> Sequence[Check]:
        found = install_check(self)
        installed = dataclasses.replace(found, optional=self.facts.doctor_optional)
        check_name = self.facts.credentials_check or f"{self.facts.name}-credentials"
        lines = [installed, credentials_check(self.facts.credentials, check_name)]
        if self.facts.limits:
            lines.append(limits_check(self))
        return tuple(lines)

    def session_argv(self, resume: str | None) -> list[str]:
        """The argv that resumes `resume` (a session the agent kept: the caller checked) or starts afresh."""
        if resume:
            return [*self.facts.resume_args, resume]
        return [*self.facts.new_session_args, str(uuid.uuid4())] if self.facts.new_session_args else []

    def worker_env(self, ctx: WorkerContext) -> dict[str, str]:
        """The variables every worker's agent gets from orch: which run and which worker it is."""
        return {RUN.name: str(ctx.run.root), WORKER.name: str(ctx.worker)}

    def prepare(self, ctx: WorkerContext) -> LaunchSpec:
        check_permission_mode(self, ctx.permission_mode)
        return self.launch(ctx)

    def launch(self, ctx: WorkerContext) -> LaunchSpec:
        """Seed ctx.config_dir (onboarding, trust, hooks) and return how to start the agent: the agent's own
        part of `prepare`, which has checked the permission mode."""
        raise NotImplementedError(f"agent {self.facts.name} states no launch")

    def ready_marker(self, run: RunFolder, worker: int) -> Path | None:
        return None

    def takes_input(self, screen: str) -> bool:
        return not any(re.search(pattern, screen, re.MULTILINE) for pattern in self.facts.deaf_screens)

    def draft_empty(self, screen: str) -> bool:
        pattern = self.facts.empty_draft
        return bool(pattern) and re.search(pattern, screen, re.MULTILINE) is not None

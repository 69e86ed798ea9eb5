"""What every agent adapter shares: its facts as one frozen object (AgentFacts), and the behaviour those facts
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import orch.run.hookwriter
from orch import settings
from orch.agents.binaries import VERSION_TIMEOUT, find_binary, version_of
from orch.agents.checks import check_permission_mode, credentials_check, install_check, limits_check
from orch.agents.credentials import gateway_env
from orch.contracts import (
    Check,
    Credentials,
    Dialog,
    GatewayEnv,
    ImageInstall,
    LaunchSpec,
    SessionStore,
    ShellTool,
    WorkerContext,
)
from orch.run.folder import RunFolder
from orch.run.paths import agent_cache

HOOKWRITER = orch.run.hookwriter.__file__
"""The stdlib-only hook writer every agent's hooks run (as a plain script: it starts fast)."""
NO_CREDENTIALS = Credentials(env=())


def hook_command(*args: str | Path) -> str:
    """A shell command line running the hook writer with this interpreter."""
    return shlex.join([sys.executable, "-S", HOOKWRITER, *map(str, args)])


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


@dataclass(frozen=True)
class SessionArgs:
    """How the agent's command line resumes a session it kept, or names a new one."""

    resume: tuple[str, ...] = ("--resume",)
    """Put before the session id to resume it (Codex: its `resume` subcommand)."""
    new: tuple[str, ...] = ()
    """Put before a fresh id for a new session; empty: the agent names its sessions itself."""

    def argv(self, resume: str | None) -> list[str]:
        if resume:
            return [*self.resume, resume]
        return [*self.new, str(uuid.uuid4())] if self.new else []


@dataclass(frozen=True)
class AgentFacts:
    """Everything orch knows about one agent CLI that is a plain fact (no behaviour): the AgentAdapter
    contract's attributes, and what the shared behaviour of AgentBase reads."""

    name: str
    title: str
    """Its name for people ("Claude Code"): doctor lines and errors say it."""
    permission_modes: tuple[str, ...]
    default_permission_mode: str
    credentials: Credentials = NO_CREDENTIALS
    shell: ShellTool | None = None
    sessions: SessionStore | None = None
    install: ImageInstall | None = None
    limits: tuple[str, ...] = ()
    strict_isolation: bool = True
    own_pane: bool = False
    """A helper in its pane reads the pane's screen and types into it (aider's watcher, Gemini's approver):
    under strict isolation through the relay's socket for its own pane alone (orch.backends.local.relay)."""
    dialogs: tuple[Dialog, ...] = ()
    """Fallback only: what it may still show although the seeded config dir prevents it."""
    deaf_screens: tuple[str, ...] = ()
    """Patterns (multi-line regexes) of screens on which its TUI drops typed text although its last hook says
    idle: a send waits until none shows (orch.fleet.talk)."""
    empty_draft: str = ""
    """A (multi-line) regex of its input box with nothing typed: a paste after which it still shows was dropped
    and is pasted again (orch.fleet.talk). Empty: no way to tell."""
    command: str = ""
    """Its executable's name on PATH (default: `name`)."""
    cache: str = ""
    """Its folder in orch's agent cache (orch.run.paths.agent_cache) where `orch setup` installs the pinned copy
    (default: `name`)."""
    install_hint: str = ""
    """How to install it (default: from `install`, as npm or pip would)."""
    version_last: bool = False
    """`--version` prints its version as the last word (`codex-cli X`), not the first."""
    version_timeout: float = VERSION_TIMEOUT
    version_env: Mapping[str, str] = field(default_factory=dict)
    """Variables every process of it gets, `--version` included."""
    doctor_optional: bool = True
    """Its doctor line is not a failure when it is missing (a machine may run other agents only)."""
    credentials_check: str = ""
    """The name of its credentials line in `orch doctor` (default: `<name>-credentials`)."""
    session_args: SessionArgs = SessionArgs()
    hook_dialect: HookDialect | None = None
    """None: its hooks send Claude Code's payloads (the hook writer's `event`)."""
    project_files: tuple[str, ...] = ()
    """What it reads from a folder as configuration or instructions (AgentAdapter.project_files)."""

    @property
    def gateway(self) -> GatewayEnv | None:
        """How a worker is pointed at the run's gateway: its base URL variable, and its first key variable
        set to the worker's token. None for an agent that calls no model API."""
        creds = self.credentials
        return gateway_env(creds) if creds.env and creds.base_url_env else None

    @property
    def bin_setting(self) -> settings.Setting[str | None] | None:
        """The ORCH_<NAME>_BIN setting that picks another executable (orch/settings.py), if it has one."""
        return settings.agent_bin(self.name)

    @property
    def cache_root(self) -> Path:
        """Where `orch setup` installs the pinned copy: an npm prefix, or a venv (`<cache>/<version>`)."""
        return agent_cache() / (self.cache or self.name) / (self.install.version if self.install else "")

    @property
    def cache_bin(self) -> Path:
        """The pinned copy `orch setup` installs: npm's `node_modules/.bin/`, or a venv's `bin/`."""
        pip = self.install is not None and self.install.pip_command is not None
        root = self.cache_root
        return (root / "bin" if pip else root / "node_modules" / ".bin") / (self.command or self.name)

    @property
    def how_to_install(self) -> str:
        if self.install_hint or self.install is None:
            return self.install_hint
        return f"orch setup --agents {self.name}"


class AgentBase:
    """An adapter made of its facts: the AgentAdapter contract's shared behaviour. A subclass sets FACTS and
    writes `launch`; it overrides the rest only where its agent differs."""

    FACTS: ClassVar[AgentFacts]

    def __init__(self, facts: AgentFacts | None = None) -> None:
        self.facts = facts or type(self).FACTS

    @property
    def name(self) -> str:
        return self.facts.name

    @property
    def permission_modes(self) -> tuple[str, ...]:
        return self.facts.permission_modes

    @property
    def default_permission_mode(self) -> str:
        return self.facts.default_permission_mode

    @property
    def credentials(self) -> Credentials:
        return self.facts.credentials

    @property
    def shell(self) -> ShellTool | None:
        return self.facts.shell

    @property
    def gateway(self) -> GatewayEnv | None:
        return self.facts.gateway

    @property
    def sessions(self) -> SessionStore | None:
        return self.facts.sessions

    @property
    def install(self) -> ImageInstall | None:
        return self.facts.install

    @property
    def limits(self) -> tuple[str, ...]:
        return self.facts.limits

    @property
    def strict_isolation(self) -> bool:
        return self.facts.strict_isolation

    @property
    def own_pane(self) -> bool:
        return self.facts.own_pane

    @property
    def project_files(self) -> tuple[str, ...]:
        return self.facts.project_files

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
        check_name = self.facts.credentials_check or f"{self.name}-credentials"
        lines = [installed, credentials_check(self.credentials, check_name)]
        if self.limits:
            lines.append(limits_check(self))
        return tuple(lines)

    def session_argv(self, resume: str | None) -> list[str]:
        """The argv that resumes `resume` (a session the agent kept: the caller checked) or starts afresh."""
        return self.facts.session_args.argv(resume)

    def worker_env(self, ctx: WorkerContext) -> dict[str, str]:
        """The variables every worker's agent gets from orch: which run and which worker it is."""
        return {settings.RUN.name: str(ctx.run.root), settings.WORKER.name: str(ctx.worker)}

    def prepare(self, ctx: WorkerContext) -> LaunchSpec:
        check_permission_mode(self, ctx.permission_mode)
        return self.launch(ctx)

    def launch(self, ctx: WorkerContext) -> LaunchSpec:
        """Seed ctx.config_dir (onboarding, trust, hooks) and return how to start the agent: the agent's own
        part of `prepare`, which has checked the permission mode."""
        raise NotImplementedError(f"agent {self.name} states no launch")

    def dialogs(self) -> Sequence[Dialog]:
        return self.facts.dialogs

    def ready_marker(self, run: RunFolder, worker: int) -> Path | None:
        return None

    def takes_input(self, screen: str) -> bool:
        return not any(re.search(pattern, screen, re.MULTILINE) for pattern in self.facts.deaf_screens)

    def draft_empty(self, screen: str) -> bool:
        pattern = self.facts.empty_draft
        return bool(pattern) and re.search(pattern, screen, re.MULTILINE) is not None

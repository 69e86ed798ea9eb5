"""The whole architecture in one file: the contracts between orch's layers.

- An **AgentAdapter** knows one agent CLI: how to seed its isolated config dir (so no first-run dialog
  ever appears), how to launch it, how its hooks report state into the run folder, and which dialogs it
  may still show (recognised on screen only as a fallback). It also states, as plain facts, the
  credentials it needs, how an offline run points it at the scripted model, where it keeps the sessions
  a resume reads, what the worker image installs for it, and its lines in `orch doctor`: nothing outside
  `orch/agents/` knows which agent runs (orch.agents.registry finds an adapter by name).
- A **Sandbox** is where a run's tmux server and controller live: `local` (this machine,
  orch.backends.local.sandbox.LocalSandbox) or `docker` (one disposable container per run,
  orch.backends.docker.sandbox.DockerSandbox). Fleet commands are the same for both; the sandbox decides where
  they execute. orch.backends.registry picks the sandbox of a run; nothing else asks which backend it is.
- The **RunFolder** (`orch.run.folder`) is the plain-file contract with workers and humans; the **bus**
  (`orch.run.bus`) is its append-only message log.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from orch.modelaccess import NO_CREDENTIALS, Credentials, GatewayEnv
from orch.run.folder import RunFolder
from orch.run.paths import agent_cache
from orch.run.records import Isolation, RunInfo, WorkerCaps
from orch.run.statusview import RunStatusView
from orch.settings.base import Setting
from orch.settings.user import agent_bin


@dataclass(frozen=True)
class WorkerContext:
    """Everything an adapter needs to prepare one worker."""

    run: RunFolder
    worker: int
    workers: int
    workdir: Path
    config_dir: Path
    permission_mode: str
    env: Mapping[str, str] = field(default_factory=dict)
    """The environment the agent will inherit from the tmux server (credentials included)."""
    model: str | None = None
    prompt: str | None = None
    """First prompt, passed on the command line so nothing has to be typed."""
    resume_session: str | None = None
    """Resume this agent session if the agent kept one (after a crash); else start afresh."""
    login_file: Path | None = None
    """The agent's own login file to give the worker: only when the gateway cannot hold the credential
    (orch.gateway.credential, PASSTHROUGH); otherwise no worker holds a credential of any kind."""
    pane_socket: Path | None = None
    """Under strict isolation, for an agent with `own_pane`: the socket (in its sandbox, or in a container a
    folder only its uid may enter) through which a
    helper beside it reads its own pane's screen and types into that pane alone (orch.backends.local.relay); the run's
    tmux server is not there. None: the helper uses the tmux server ($TMUX), as under shared isolation."""
    boxed: bool = False
    """orch's boundary encloses the worker (a run's container, or its own bubblewrap sandbox: its confinement's
    `boxed`): an agent's own sandbox cannot make its namespaces there, and is off (Codex's)."""
    hook_url: str | None = None  # local strict: where an `http_hooks` agent posts (orch.backends.local.httphooks)


@dataclass(frozen=True)
class LaunchSpec:
    """How to start one worker in its pane. `env` holds no secrets: those come from the tmux server."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path = Path()


@dataclass(frozen=True)
class Dialog:
    """A blocking screen the agent may show; `keys` answer it (tmux key names)."""

    name: str
    pattern: str
    keys: tuple[str, ...]
    every_start: bool = False
    """Shown at every start as designed (Codex's "Folder access"): answered from a boot's start (orch.fleet.booting)."""


@dataclass(frozen=True)
class SessionStore:
    """Where the agent keeps the sessions a resume reads (`WorkerContext.resume_session`)."""

    subdir: str
    """Relative to the worker's config dir. A run's container links it into the run folder
    (`sessions/agent-N`), so a later container can resume the session after the old one died."""


TEXT_SHELL, TEXT_EDIT = "text_shell", "text_edit"
"""The gateway ledger's tool names for a command in a fenced shell block of an answer with no tool calls (aider runs
those lines: orch.gateway.apis.openai_chat) and for its SEARCH/REPLACE block on `file_path` (orch.jobs.authorship)."""


@dataclass(frozen=True)
class ShellTool:
    """The tool through which the agent's model runs a shell command, as the model API names it (the gateway's
    ledger records each call): the lead matches commands a verifier cites against these calls."""

    name: str
    """The tool's name in the model's tool calls (Claude Code's `Bash`)."""
    command_field: str
    """The field of the call's input holding the command line."""
    hook_name: str = ""
    """The name its hooks log the tool under, where that is another (Codex CLI's hooks say `Bash`)."""

    @property
    def in_hooks(self) -> str:
        return self.hook_name or self.name


@dataclass(frozen=True)
class ImageInstall:
    """What the worker image (docker/Dockerfile) installs for the agent, read by the image build."""

    package: str
    """Its package: on npm, or on PyPI when `pip_command` is set."""
    version: str
    """Pinned (orch.versions): the image, `orch doctor` and the tests use this one version."""
    build_arg: str
    """The Dockerfile's build-arg prefix for the image's own agent (Claude Code): it reads
    `<build_arg>_PACKAGE` and `<build_arg>_VERSION`. Every other agent goes into AGENT_NPM or AGENT_PIP."""
    node: bool = False
    """Its command is a Node.js program (or a Node wrapper around a native one): the image then carries a
    Node runtime, itself from the npm registry (orch.versions.NODE_VERSION)."""
    pip_command: str | None = None
    """Set for a PyPI package: the command it installs. The image puts the package in a venv of its own
    (/opt/pip/<command>: its pinned dependencies never meet orch's) and links the command onto PATH."""
    config_npm: str | None = None
    """An npm package (`name@version`) the agent would install into its config dir at run time unless it is
    there: the image installs it once (/opt/agents/config-deps) for the adapter to link (opencode's plugins)."""
    size_mb: int = 0
    """About how many MB the pinned version takes installed (`du -sm` of what `orch setup` made): `orch setup`
    says it before it starts, and its bar measures against it."""

    def build_args(self, version: str | None = None) -> dict[str, str]:
        return {f"{self.build_arg}_PACKAGE": self.package, f"{self.build_arg}_VERSION": version or self.version}

    def spec(self) -> str:
        """`package@version` as npm installs it, `package==version` as pip does."""
        return f"{self.package}=={self.version}" if self.pip_command else f"{self.package}@{self.version}"


@dataclass(frozen=True)
class Check:
    """One line of `orch doctor`: what was found, and the fix when it is missing."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None
    optional: bool = False


VERSION_TIMEOUT = 30.0  # seconds an agent's `--version` may take


@dataclass(frozen=True)
class AgentFacts:
    """What orch knows of one agent CLI as plain facts: an AgentAdapter's `facts` (behaviour: orch.agents.base)."""

    name: str
    title: str
    """Its name for people ("Claude Code"): doctor lines and errors say it."""
    permission_modes: tuple[str, ...]
    default_permission_mode: str
    credentials: Credentials = NO_CREDENTIALS
    """What it needs for a real model API (empty `env` for an agent that calls none)."""
    shell: ShellTool | None = None
    """None: its model has no shell tool (aider: shell blocks in its answers are not tool calls)."""
    sessions: SessionStore | None = None
    """None: the agent keeps no session a resume could read."""
    install: ImageInstall | None = None
    """None: nothing to install (the scripted agent is part of orch)."""
    limits: tuple[str, ...] = ()
    """What this agent cannot do and how orch degrades, a clause each: `orch doctor` and a run's report say them."""
    strict_isolation: bool = True
    """It runs under strict isolation (its own uid, no access to the run's tmux server)."""
    own_pane: bool = False
    """A helper in its pane reads the pane's screen and types into it (aider's watcher, Gemini's approver):
    under strict isolation through the relay's socket for its own pane alone (orch.backends.local.relay)."""
    http_hooks: bool = False  # it posts its hooks over HTTP to WorkerContext.hook_url when given one (Claude Code)
    dialogs: tuple[Dialog, ...] = ()
    """Fallback only: what it may still show although the seeded config dir prevents it."""
    deaf_screens: tuple[str, ...] = ()
    """Patterns (multi-line regexes) of screens on which its TUI drops typed text although its last hook says
    idle: a send waits until none shows (orch.fleet.talk)."""
    empty_draft: str = ""
    """A (multi-line) regex of its input box with nothing typed: a paste after which it still shows was dropped
    and is pasted again (orch.fleet.talk). Empty: no way to tell."""
    paste_window: float = 0.0
    """Seconds after a paste in which its TUI takes Enter as a new line: orch.fleet.talk waits, then presses again."""
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
    resume_args: tuple[str, ...] = ("--resume",)
    """Put before a kept session's id to resume it (Codex: its `resume` subcommand)."""
    new_session_args: tuple[str, ...] = ()
    """Put before a fresh id for a new session; empty: the agent names its sessions itself."""
    project_files: tuple[str, ...] = ()
    """Globs of its folder's config and instructions (`.claude/**`, `AGENTS.md`): orch.lead.changes.agentfiles."""

    @property
    def gateway(self) -> GatewayEnv | None:
        """How a worker is pointed at the run's gateway: its base URL variable, and its first key variable
        set to the worker's token (orch.agents.credentials.gateway_env). None: it calls no model API."""
        creds = self.credentials
        return GatewayEnv(creds.base_url_env, creds.env[0]) if creds.env and creds.base_url_env else None

    @property
    def bin_setting(self) -> Setting[str | None] | None:
        """The ORCH_<NAME>_BIN setting that picks another executable (orch/settings/user.py), if it has one."""
        return agent_bin(self.name)

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


@runtime_checkable
class AgentAdapter(Protocol):
    """One agent CLI: its facts (read `adapter.facts.name`, `.credentials`, `.sessions`...), then behaviour."""

    @property
    def facts(self) -> AgentFacts: ...

    def can_run_strict(self) -> bool:
        """Whether it runs under strict isolation (a local bubblewrap sandbox of its own, or a uid of its own in
        a container): it needs no tmux server, or reaches its own pane through the relay (`own_pane`)."""
        ...

    def doctor(self) -> Sequence[Check]:
        """This agent's lines in `orch doctor` (installed? version? credentials?)."""
        ...

    def binary(self) -> Path:
        """The agent executable; raises UsageError naming the install command when missing."""
        ...

    def version(self) -> str | None: ...

    def prepare(self, ctx: WorkerContext) -> LaunchSpec:
        """Seed ctx.config_dir (onboarding, trust, hooks, status line) and return the launch spec."""
        ...

    def ready_marker(self, run: RunFolder, worker: int) -> Path | None:
        """A file that exists once the agent's UI takes input (None: its SessionStart is enough)."""
        ...

    def takes_input(self, screen: str) -> bool:
        """False while `screen` shows a state in which the agent drops typed text, though its hooks say idle."""
        ...

    def draft_empty(self, screen: str) -> bool:
        """True if `screen` shows its input box with nothing typed (False: it has text, or no way to tell)."""
        ...


@dataclass(frozen=True)
class UpRequest:
    """What `orch up` was asked for."""

    name: str
    workers: int
    agent: str
    workdir: Path
    permission_mode: str | None = None
    model: str | None = None
    replace: bool = False
    offline: bool = False
    """Drive the agents with orch's scripted model server instead of a real model API."""
    prompts: dict[int, str] = field(default_factory=dict)
    worker_models: dict[int, str] = field(default_factory=dict)
    """Per-worker model (worker -> model) where it differs from `model` (a fleet spec's agent groups)."""
    worker_agents: dict[int, str] = field(default_factory=dict)
    """Per-worker agent (worker -> agent) where it differs from `agent`: a mixed fleet."""
    replay: Path | None = None
    """A cassette (a recorded run folder, or an exported recording: the only kind a container run takes):
    the run's gateway answers every model request from it."""
    isolation: Isolation = Isolation.SHARED
    """STRICT: each worker its own uid and outbox, the workdir read-only (the container backend only)."""
    caps: WorkerCaps = field(default_factory=WorkerCaps)
    """Per-worker caps on processes, memory and disk, and the run folder's (orch.fleet.caps)."""
    writers: bool = False
    """An `orch run` with writer tasks: the run folder gets the worktrees and changes they need."""
    checks: bool = False
    """Its writers' changes are checked (the spec's `checks`): in a strict run's container, as a uid of their own
    that the firewall cuts off the network (orch.container.egress.refuse_open_checks)."""


@dataclass(frozen=True)
class OrchCommand:
    """An `orch` command that must run where a run's fleet lives: `orch ARGS` there, or `here` in this process."""

    args: list[str]
    here: Callable[[], int | None]
    """The command's own work, for when it runs where the fleet lives; its exit code (None: 0)."""
    stdin: str | None = None
    interactive: bool = False
    """It takes over the terminal (attach): this process is replaced."""
    folder_when_down: bool = False
    """While the fleet is down, a run folder on this machine answers it here (read: the transcripts)."""

    def run_here(self) -> int:
        return self.here() or 0


@runtime_checkable
class Sandbox(Protocol):
    """Where a run's tmux server lives, as seen from this process: this machine or the run's container."""

    def check(self, request: UpRequest) -> None:
        """Refuse, as `up` would (a UsageError), what `up` cannot start, without making anything: `orch spec
        check` and `orch run` ask it before a run exists."""
        ...

    def up(self, request: UpRequest) -> RunInfo:
        """Create the run and its fleet; return once the workers booted (nothing is left behind on failure)."""
        ...

    def resume(self, name: str) -> RunInfo:
        """Relaunch a run whose tmux server or container died, on the same folder (sessions resumed)."""
        ...

    def forward(self, info: RunInfo, command: OrchCommand) -> int:
        """Run the command where the run's tmux server lives, streaming its output; its exit code."""
        ...

    def status(self, run: RunFolder) -> RunStatusView: ...

    def alive(self, info: RunInfo) -> bool:
        """The run's fleet is up (its tmux server, or its container, runs)."""
        ...

    def state(self, info: RunInfo) -> str:
        """What `orch ls` shows for the run's container: running, exited (137), ...; "-" for no container."""
        ...

    def pull(self, info: RunInfo) -> bool:
        """Copy the run folder back into the local one when it lives elsewhere; False when it is here."""
        ...

    def push(self, info: RunInfo, files: list[Path]) -> None:
        """Files written into the local run folder that the fleet must see where its folder lives."""
        ...

    def screens(self, info: RunInfo, workers: Sequence[int], lines: int) -> dict[int, str] | None:
        """The last `lines` of these workers' panes as they are now (a worker with no live pane left out);
        None when this sandbox cannot show them cheaply (a container's: one exec per capture)."""
        ...

    def kill(self, info: RunInfo) -> None:
        """Stop and remove what runs the fleet; the run folder stays."""
        ...

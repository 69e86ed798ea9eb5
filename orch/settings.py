"""Every ORCH_* environment variable, with its default and what it does: declared here and nowhere else.

Nothing is read at import time: `HOME.get()` reads its variable from the environment on each call (so a
test that sets one sees it at once), parses it, and turns a bad value into a one-line SettingError that
names the variable. Unset and empty are the same: the default. `internal` ones are plumbing between orch's
own processes (the host CLI, a run's container, the workers' hooks); the rest are documented in
docs/settings.md's table, which tests/test_settings.py keeps in step with this module.

Kept light (the standard library and orch.errors only) because the worker-side programs import it:
`orch bus post` and the scripted agent. orch/run/hookwriter.py runs as a bare script and reads its one
variable (ORCH_WORKER) itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Generic, TypeVar

from orch.errors import SettingError
from orch.versions import DEFAULT_AGENT, DEFAULT_BASE_IMAGE, DEFAULT_IMAGE_TAG

T = TypeVar("T")

ALL: dict[str, Setting[Any]] = {}
"""Every declared variable by name, in declaration order."""

_warned: set[str] = set()


class Setting(Generic[T]):
    """One environment variable: its name, its default (as the variable's text), how to read it."""

    def __init__(
        self,
        name: str,
        default: str,
        parse: Callable[[str], T],
        help: str,
        *,
        internal: bool = False,
        shown: str | None = None,
        deprecated: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self.default = default
        """The value when unset or empty, written as the variable would be ("": nothing)."""
        self.parse = parse
        """Text -> value; raises ValueError saying what a good value looks like."""
        self.help = help
        self.internal = internal
        self.shown = shown if shown is not None else (f"`{default}`" if default else "unset")
        """The default as docs/settings.md shows it."""
        self.deprecated = deprecated
        """Old names still read, with a warning, when `name` is unset."""
        ALL[name] = self

    def __repr__(self) -> str:
        return f"Setting({self.name!r})"

    def is_set(self, env: Mapping[str, str] | None = None) -> bool:
        """Present in the environment, even if empty (for variables where empty means "none")."""
        env = os.environ if env is None else env
        return any(name in env for name in (self.name, *self.deprecated))

    def get(self, env: Mapping[str, str] | None = None) -> T:
        """The variable's value from `env` (default: os.environ), parsed; SettingError if it is bad."""
        env = os.environ if env is None else env
        name, text = self.name, env.get(self.name, "")
        for old in self.deprecated:
            if not text and env.get(old):
                name, text = old, env[old]
                _warn_deprecated(old, self.name)
        try:
            return self.parse(text or self.default)
        except ValueError as exc:
            default = self.shown.replace("`", "")
            raise SettingError(
                f"environment variable {name}={text!r}: {exc}",
                hint=f"correct {name}, or unset it for the default: {default}",
            ) from None


def _warn_deprecated(old: str, new: str) -> None:
    if old not in _warned:
        _warned.add(old)
        import logging  # only here: the worker-side programs that import this module never log

        logging.getLogger(__name__).warning("%s is deprecated: set %s instead", old, new)


# --- parsers: each raises ValueError saying what it wants -------------------------------------------
def _text(value: str) -> str:
    return value


def _optional(value: str) -> str | None:
    return value or None


def _path(value: str) -> Path:
    return Path(value).expanduser()


def _optional_path(value: str) -> Path | None:
    return Path(value).expanduser() if value else None


def _whole(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError("expected a whole number") from None


def _at_least_one(value: str) -> int:
    number = _whole(value)
    if number < 1:
        raise ValueError("expected a whole number, at least 1")
    return number


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError("expected a number of seconds") from None
    if not 0 < seconds <= 3600:
        raise ValueError("expected a number of seconds above 0, at most 3600")
    return seconds


def _optional_whole(value: str) -> int | None:
    return _whole(value) if value else None


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _flag(value: str) -> bool:
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ValueError("expected 1 or 0")


def _optional_flag(value: str) -> bool | None:
    return _flag(value) if value else None


def _list(separator: str) -> Callable[[str], list[str]]:
    def parse(value: str) -> list[str]:
        return [item.strip() for item in value.split(separator) if item.strip()]

    return parse


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _log_level(value: str) -> str:
    if value.upper() not in LOG_LEVELS:
        raise ValueError(f"expected one of {', '.join(LOG_LEVELS)}")
    return value.upper()


def _prompts(value: str) -> dict[int, str]:
    import json

    try:
        data = json.loads(value) if value else {}
        return {int(k): str(v) for k, v in data.items()}
    except (ValueError, AttributeError):
        raise ValueError("expected a JSON object of worker number -> prompt") from None


# --- for users (docs/settings.md's table) ---------------------------------------------------------------
HOME = Setting(
    "ORCH_HOME",
    "~/.orch",
    _path,
    "Where orch keeps run folders (runs/NAME), the workers' agent config dirs and --copy workspaces.",
)
IMAGE = Setting(
    "ORCH_IMAGE",
    DEFAULT_IMAGE_TAG,
    _text,
    "The worker image `orch up`, `orch run` and `orch demo` start and `orch image build` tags (--image, --tag).",
    deprecated=("ORCH_IMAGE_TAG",),
)
BASE_IMAGE = Setting(
    "ORCH_BASE_IMAGE", DEFAULT_BASE_IMAGE, _text, "The base image the worker image is built from (--base overrides)."
)
CA_BUNDLE = Setting(
    "ORCH_CA_BUNDLE",
    "",
    _optional_path,
    "An extra CA bundle trusted while building the image only, for TLS-intercepting proxies (--ca-bundle overrides).",
)


def _agent_bin(name: str, title: str, pinned: str) -> Setting[str | None]:
    """ORCH_<NAME>_BIN: the executable of agent `name` (its adapter finds this by name: agent_bin)."""
    shown = f"`{name}` on PATH, else the pinned {pinned}"
    return Setting(f"ORCH_{name.upper()}_BIN", "", _optional, f"The {title} binary to run.", shown=shown)


def agent_bin(name: str) -> Setting[str | None] | None:
    """The ORCH_<NAME>_BIN setting of an agent, if it has one (orch.contracts.AgentFacts.bin_setting)."""
    return ALL.get(f"ORCH_{name.upper()}_BIN")


CLAUDE_BIN = _agent_bin("claude", "Claude Code", "copy in ~/.cache/orch/claude-code/")
CODEX_BIN = _agent_bin("codex", "Codex CLI", "copy in ~/.cache/orch/codex/")
OPENCODE_BIN = _agent_bin("opencode", "opencode", "copy in ~/.cache/orch/opencode/")
AIDER_BIN = _agent_bin("aider", "aider", "venv in ~/.cache/orch/aider/")
GEMINI_BIN = _agent_bin("gemini", "Gemini CLI", "copy in ~/.cache/orch/gemini-cli/")
PRICING = Setting(
    "ORCH_PRICING",
    "",
    _optional_path,
    "A model price table (JSON, USD per million tokens) the gateway uses instead of the shipped one.",
    shown="orch/data/pricing.json",
)
LOG_LEVEL = Setting(
    "ORCH_LOG_LEVEL", "WARNING", _log_level, "How much orch logs on stderr; DEBUG adds tracebacks of unexpected errors."
)
DOCKER_REMOTE = Setting(
    "ORCH_DOCKER_REMOTE",
    "",
    _optional_flag,
    "1: treat the Docker engine as remote (volumes, never bind mounts); 0: as local (a tcp:// engine on this machine).",
    shown="decided by the engine's address",
)
DEFAULT_ALLOW = Setting(
    "ORCH_DEFAULT_ALLOW",
    "",
    _list(","),
    "Replaces the egress allowlist's default hosts (comma-separated; set but empty: none), for sites with mirrors.",
    shown="npm, PyPI and GitHub hosts",
)
GATEWAY_UID = Setting(
    "ORCH_GATEWAY_UID",
    "61000",
    _whole,
    "The uid the run's model gateway runs as in its container (it alone holds the credential); never the run's uid.",
)
WORKER_UID_BASE = Setting(
    "ORCH_WORKER_UID_BASE",
    "62000",
    _whole,
    "Strict isolation: worker N is uid and gid BASE+N in its container (unset: `orch up` picks a range per run).",
)
BWRAP = Setting(
    "ORCH_BWRAP",
    "",
    _optional,
    "Local strict isolation: the bubblewrap executable that sandboxes each local worker.",
    shown="`bwrap` on PATH",
)
BASE_SUITE = Setting(
    "ORCH_BASE_SUITE", "bookworm", _text, "scripts/ci-base-image.sh: the Debian suite of the base image it bootstraps."
)
# compose.yaml passes these to `orch serve-run --create` and the container's init (orch up sets them itself).
EGRESS = Setting("ORCH_EGRESS", "allowlist", _text, "compose.yaml: the container's egress (allowlist, none, open).")
ALLOW = Setting(
    "ORCH_ALLOW", "", _list(","), "compose.yaml: extra egress hosts, IPs or CIDRs, comma-separated (orch up: --allow)."
)
UID = Setting(
    "ORCH_UID",
    "",
    _optional_whole,
    "compose.yaml: the uid of the run's controller and workers in the container (orch up: yours).",
    shown="`1000` (compose.yaml)",
)
WORKERS = Setting("ORCH_WORKERS", "1", _whole, "compose.yaml: how many workers the fleet service starts.")
AGENT = Setting("ORCH_AGENT", DEFAULT_AGENT, _text, "compose.yaml: the workers' agent.")
PERMISSION_MODE = Setting(
    "ORCH_PERMISSION_MODE", "", _optional, "compose.yaml: the workers' permission mode.", shown="the agent's default"
)
MODEL = Setting("ORCH_MODEL", "", _optional, "compose.yaml: the workers' model.", shown="the agent's default")
OFFLINE = Setting(
    "ORCH_OFFLINE", "0", _flag, "compose.yaml: 1 drives the workers with orch's scripted model server (no model API)."
)
# compose.yaml's own, not read by orch: where the run folders and the workspace are, and what to run.
RUN = Setting(
    "ORCH_RUN", "demo", _text, "compose.yaml: the run's name (in a worker's own environment: its run folder)."
)
CREDENTIALS = Setting(
    "ORCH_CREDENTIALS",
    "/dev/null",
    _text,
    "compose.yaml: a file of model API credentials (`ANTHROPIC_API_KEY=...` lines), mounted as a secret that "
    "only the container's init reads (for the gateway); it must not be readable by ORCH_UID.",
    shown="none",
)
SPEC = Setting("ORCH_SPEC", "/workspace/fleet.yaml", _text, "compose.yaml: the fleet spec the lead service runs.")
RUNS = Setting(
    "ORCH_RUNS", "runs", _text, "compose.yaml: the run folders: a named volume, or a host path.", shown="volume `runs`"
)
WORKSPACE = Setting(
    "ORCH_WORKSPACE",
    "workspace",
    _text,
    "compose.yaml: the workdir: a named volume, or a host path.",
    shown="volume `workspace`",
)

# --- internal: set by orch for its own processes ---------------------------------------------------
CHECKS_AT_ONCE = Setting(
    "ORCH_CHECKS_AT_ONCE",
    "2",
    _at_least_one,
    "How many change checks (a gate's, an integration's) the controller runs at once, off its loop; the rest wait. "
    "In a container one at a time: every check runs as the one checks' uid, whose processes each check's end kills.",
)
IN_CONTAINER = Setting("ORCH_IN_CONTAINER", "0", _flag, "1 inside a run's container.", internal=True)
AGENTS_DIR = Setting(
    "ORCH_AGENTS_DIR",
    "",
    _optional_path,
    "The workers' agent config dirs; a run's container points it at its tmpfs home.",
    internal=True,
    shown="$ORCH_HOME/agents",
)
GID = Setting("ORCH_GID", "", _optional_whole, "The gid of the run's processes in the container.", internal=True)
EGRESS_ALLOW = Setting(
    "ORCH_EGRESS_ALLOW",
    "",
    _list(","),
    "The allowlist `orch up` resolved (set: the init uses it as is).",
    internal=True,
)
CHOWN = Setting(
    "ORCH_CHOWN",
    "",
    _list(":"),
    "Mount points (:-separated) the init hands to the run's uid when root owns them.",
    internal=True,
)
CREDENTIALS_HOME_PATH = Setting(
    "ORCH_CREDENTIALS_HOME_PATH",
    "",
    _optional,
    "Where under $HOME the init copies the mounted login file (the agent's LoginFile.in_home).",
    internal=True,
)
BOOT_STDIN = Setting(
    "ORCH_BOOT_STDIN",
    "0",
    _flag,
    "1: the container's init reads its boot line (the model upstream, credential included) from stdin.",
    internal=True,
)
BOOT_FILE = Setting(
    "ORCH_BOOT_FILE",
    "",
    _optional_path,
    "A file holding the init's boot line instead of stdin (a swarm task's secret, readable by the gateway's uid).",
    internal=True,
)
SWARM_COLLECTOR = Setting(
    "ORCH_SWARM_COLLECTOR",
    "",
    _optional,
    "A swarm task: its run's collector, `address:port` (open to the run's uid alone, which syncs the run home).",
    internal=True,
)
SWARM_LIFE = Setting(
    "ORCH_SWARM_LIFE",
    "1",
    _at_least_one,
    "A swarm task: which life of the run it is (1, then one per resume).",
    internal=True,
)
SWARM_SYNC_INTERVAL = Setting(
    "ORCH_SWARM_SYNC_INTERVAL",
    "2",
    _seconds,
    "Seconds between a swarm run's passes home: at most this much work is redone after its node dies.",
)
GATEWAY_CREDENTIAL = Setting(
    "ORCH_GATEWAY_CREDENTIAL",
    "",
    _text,
    "Set by the container's init for the run it started a gateway for: run.json's `credential` (schemes, no secret).",
    internal=True,
)
GATEWAY_HOLDS = Setting(
    "ORCH_GATEWAY_HOLDS",
    "",
    _list(","),
    "Set by the container's init (compose) when its gateway holds credentials: the agent kinds they serve "
    "(names, no secret), which `orch run` checks a live fleet against instead of its own environment.",
    internal=True,
)
PROMPTS = Setting(
    "ORCH_PROMPTS", "", _prompts, "The workers' first prompts for `orch serve-run`, as JSON.", internal=True
)
WORKER = Setting(
    "ORCH_WORKER", "", _text, "A worker's number, in its own environment (read by its hooks).", internal=True
)
SANDBOXED = Setting(
    "ORCH_SANDBOXED",
    "0",
    _flag,
    "1 in a local strict worker's bubblewrap sandbox (an agent's own sandbox is off there: orch's is the boundary).",
    internal=True,
)
STATE_FILE = Setting(
    "ORCH_STATE_FILE", "", _optional_path, "A worker's hook-event file (state/agent-N.jsonl).", internal=True
)
SCRIPTED_DROP_ENTERS = Setting(
    "ORCH_SCRIPTED_DROP_ENTERS",
    "0",
    _whole,
    "Test knob: the scripted agent ignores its first N Enter keys.",
    internal=True,
)
SCRIPTED_NEWLINE_ENTERS = Setting(
    "ORCH_SCRIPTED_NEWLINE_ENTERS",
    "0",
    _whole,
    "Test knob: the scripted agent takes its first N Enter keys as a new line in its draft (as Gemini CLI does an "
    "Enter inside its paste window).",
    internal=True,
)


def gateway_handle(run_name: str) -> Path:
    """A run gateway's handle (its address, control key): under $ORCH_HOME/gateways/, or in a run's container
    (its root read-only) in its temp dir, where its init writes it and its controller reads it."""
    if IN_CONTAINER.get():
        return Path(os.environ.get("TMPDIR") or "/tmp") / f"orch-gateway-{run_name}.json"
    return HOME.get() / "gateways" / f"{run_name}.json"


# --- defaults of command-line options that have no variable ----------------------------------------
CONTAINER_MEMORY = "8g"
"""`orch up --memory`: the run container's memory limit (no swap beyond it)."""
CONTAINER_PIDS = 4096
"""`orch up --pids`: the run container's process/thread limit."""
CONTAINER_CPUS = 2.0
"""`orch up --cpus`: at most this many CPUs, fewer on a machine with fewer."""

# --- per-worker caps (`orch up --pids-per-worker ...`, the spec's `limits`; SECURITY.md "Caps") -------
WORKER_PIDS = 512
"""Processes and threads one worker's uid may have (RLIMIT_NPROC counts threads: Node has ~15)."""
WORKER_MEMORY = "2g"
"""Resident memory of one worker's processes together before the controller's watchdog stops them."""
WORKER_DISK = "1g"
"""Bytes one worker may have written (its outbox, session store, config dir, tmp); also each file's cap."""
RUN_FOLDER_MAX = "20g"
"""The run folder's size past which the controller stops the biggest writer and fails its job."""
CAPS_RESERVE = 256
"""Processes the container keeps beyond the workers' caps, for the controller, tmux and the gateway."""

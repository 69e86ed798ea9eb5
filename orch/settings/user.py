"""The variables a user sets (docs/settings.md's table), but compose.yaml's (compose.py)."""

from __future__ import annotations

from orch.settings import parse
from orch.settings.base import ALL, Setting
from orch.versions import DEFAULT_BASE_IMAGE, DEFAULT_IMAGE_TAG

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _log_level(value: str) -> str:
    if value.upper() not in LOG_LEVELS:
        raise ValueError(f"expected one of {', '.join(LOG_LEVELS)}")
    return value.upper()


HOME = Setting(
    "ORCH_HOME",
    "~/.orch",
    parse.path,
    "Where orch keeps run folders (runs/NAME), the workers' agent config dirs and --copy workspaces.",
)
IMAGE = Setting(
    "ORCH_IMAGE",
    DEFAULT_IMAGE_TAG,
    parse.text,
    "The worker image `orch up`, `orch run` and `orch demo` start and `orch image build` tags (--image, --tag).",
    deprecated=("ORCH_IMAGE_TAG",),
)
BASE_IMAGE = Setting(
    "ORCH_BASE_IMAGE",
    DEFAULT_BASE_IMAGE,
    parse.text,
    "The base image the worker image is built from (--base overrides).",
)
CA_BUNDLE = Setting(
    "ORCH_CA_BUNDLE",
    "",
    parse.optional_path,
    "An extra CA bundle trusted while building the image only, for TLS-intercepting proxies (--ca-bundle overrides).",
)


def _agent_bin(name: str, title: str, pinned: str) -> Setting[str | None]:
    """ORCH_<NAME>_BIN: the executable of agent `name` (its adapter finds this by name: agent_bin)."""
    shown = f"`{name}` on PATH, else the pinned {pinned}"
    return Setting(f"ORCH_{name.upper()}_BIN", "", parse.optional, f"The {title} binary to run.", shown=shown)


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
    parse.optional_path,
    "A model price table (JSON, USD per million tokens) the gateway uses instead of the shipped one.",
    shown="orch/data/pricing.json",
)
LOG_LEVEL = Setting(
    "ORCH_LOG_LEVEL", "WARNING", _log_level, "How much orch logs on stderr; DEBUG adds tracebacks of unexpected errors."
)
DOCKER_REMOTE = Setting(
    "ORCH_DOCKER_REMOTE",
    "",
    parse.optional_flag,
    "1: treat the Docker engine as remote (volumes, never bind mounts); 0: as local (a tcp:// engine on this machine).",
    shown="decided by the engine's address",
)
DEFAULT_ALLOW = Setting(
    "ORCH_DEFAULT_ALLOW",
    "",
    parse.separated(","),
    "Replaces the egress allowlist's default hosts (comma-separated; set but empty: none), for sites with mirrors.",
    shown="npm, PyPI and GitHub hosts",
)
GATEWAY_UID = Setting(
    "ORCH_GATEWAY_UID",
    "61000",
    parse.whole,
    "The uid the run's model gateway runs as in its container (it alone holds the credential); never the run's uid.",
)
WORKER_UID_BASE = Setting(
    "ORCH_WORKER_UID_BASE",
    "62000",
    parse.whole,
    "Strict isolation: worker N is uid and gid BASE+N in its container (unset: `orch up` picks a range per run).",
)
BWRAP = Setting(
    "ORCH_BWRAP",
    "",
    parse.optional,
    "Local strict isolation: the bubblewrap executable that sandboxes each local worker.",
    shown="`bwrap` on PATH",
)
BASE_SUITE = Setting(
    "ORCH_BASE_SUITE",
    "bookworm",
    parse.text,
    "scripts/ci-base-image.sh: the Debian suite of the base image it bootstraps.",
)
CHECKS_AT_ONCE = Setting(
    "ORCH_CHECKS_AT_ONCE",
    "2",
    parse.at_least_one,
    "How many change checks (a gate's, an integration's) the controller runs at once, off its loop; the rest wait. "
    "In a container one at a time: every check runs as the one checks' uid, whose processes each check's end kills.",
)
SWARM_SYNC_INTERVAL = Setting(
    "ORCH_SWARM_SYNC_INTERVAL",
    "2",
    parse.seconds,
    "Seconds between a swarm run's passes home: at most this much work is redone after its node dies.",
)

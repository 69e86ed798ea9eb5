"""Internal variables: set by orch for its own processes (the host CLI, a run's container, the workers' hooks).

docs/settings.md lists them under its table, not for users to set.
"""

from __future__ import annotations

import os
from pathlib import Path

from orch.settings import parse
from orch.settings.base import Setting
from orch.settings.user import HOME


def _prompts(value: str) -> dict[int, str]:
    import json

    try:
        data = json.loads(value) if value else {}
        return {int(k): str(v) for k, v in data.items()}
    except (ValueError, AttributeError):
        raise ValueError("expected a JSON object of worker number -> prompt") from None


IN_CONTAINER = Setting("ORCH_IN_CONTAINER", "0", parse.flag, "1 inside a run's container.", internal=True)
AGENTS_DIR = Setting(
    "ORCH_AGENTS_DIR",
    "",
    parse.optional_path,
    "The workers' agent config dirs; a run's container points it at its tmpfs home.",
    internal=True,
    shown="$ORCH_HOME/agents",
)
GID = Setting("ORCH_GID", "", parse.optional_whole, "The gid of the run's processes in the container.", internal=True)
EGRESS_ALLOW = Setting(
    "ORCH_EGRESS_ALLOW",
    "",
    parse.separated(","),
    "The allowlist `orch up` resolved (set: the init uses it as is).",
    internal=True,
)
CHOWN = Setting(
    "ORCH_CHOWN",
    "",
    parse.separated(":"),
    "Mount points (:-separated) the init hands to the run's uid when root owns them.",
    internal=True,
)
CREDENTIALS_HOME_PATH = Setting(
    "ORCH_CREDENTIALS_HOME_PATH",
    "",
    parse.optional,
    "Where under $HOME the init copies the mounted login file (the agent's LoginFile.in_home).",
    internal=True,
)
BOOT_STDIN = Setting(
    "ORCH_BOOT_STDIN",
    "0",
    parse.flag,
    "1: the container's init reads its boot line (the model upstream, credential included) from stdin.",
    internal=True,
)
BOOT_FILE = Setting(
    "ORCH_BOOT_FILE",
    "",
    parse.optional_path,
    "A file holding the init's boot line instead of stdin (a swarm task's secret, readable by the gateway's uid).",
    internal=True,
)
SWARM_COLLECTOR = Setting(
    "ORCH_SWARM_COLLECTOR",
    "",
    parse.optional,
    "A swarm task: its run's collector, `address:port` (open to the run's uid alone, which syncs the run home).",
    internal=True,
)
SWARM_LIFE = Setting(
    "ORCH_SWARM_LIFE",
    "1",
    parse.at_least_one,
    "A swarm task: which life of the run it is (1, then one per resume).",
    internal=True,
)
GATEWAY_CREDENTIAL = Setting(
    "ORCH_GATEWAY_CREDENTIAL",
    "",
    parse.text,
    "Set by the container's init for the run it started a gateway for: run.json's `credential` (schemes, no secret).",
    internal=True,
)
GATEWAY_HOLDS = Setting(
    "ORCH_GATEWAY_HOLDS",
    "",
    parse.separated(","),
    "Set by the container's init (compose) when its gateway holds credentials: the agent kinds they serve "
    "(names, no secret), which `orch run` checks a live fleet against instead of its own environment.",
    internal=True,
)
PROMPTS = Setting(
    "ORCH_PROMPTS", "", _prompts, "The workers' first prompts for `orch serve-run`, as JSON.", internal=True
)
WORKER = Setting(
    "ORCH_WORKER", "", parse.text, "A worker's number, in its own environment (read by its hooks).", internal=True
)
SANDBOXED = Setting(
    "ORCH_SANDBOXED",
    "0",
    parse.flag,
    "1 in a local strict worker's bubblewrap sandbox (an agent's own sandbox is off there: orch's is the boundary).",
    internal=True,
)
STATE_FILE = Setting(
    "ORCH_STATE_FILE", "", parse.optional_path, "A worker's hook-event file (state/agent-N.jsonl).", internal=True
)
CHECK_TOKEN = Setting(
    "ORCH_CHECK_TOKEN",
    "",
    parse.optional,
    "A check run as a shared run's own uid in its container: the token its processes carry, killed by it after.",
    internal=True,
)
SCRIPTED_DROP_ENTERS = Setting(
    "ORCH_SCRIPTED_DROP_ENTERS",
    "0",
    parse.whole,
    "Test knob: the scripted agent ignores its first N Enter keys.",
    internal=True,
)
SCRIPTED_NEWLINE_ENTERS = Setting(
    "ORCH_SCRIPTED_NEWLINE_ENTERS",
    "0",
    parse.whole,
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

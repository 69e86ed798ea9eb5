"""compose.yaml's variables: the fleet a container runs when `orch up` does not start it (docs/container.md).

compose.yaml passes these to `orch serve-run --create` and the container's init (orch up sets them itself);
the last ones are compose.yaml's own, not read by orch: where the run folders and the workspace are, and what
to run.
"""

from __future__ import annotations

from orch.settings import parse
from orch.settings.base import Setting
from orch.versions import DEFAULT_AGENT

EGRESS = Setting(
    "ORCH_EGRESS", "allowlist", parse.text, "compose.yaml: the container's egress (allowlist, none, open)."
)
ALLOW = Setting(
    "ORCH_ALLOW",
    "",
    parse.separated(","),
    "compose.yaml: extra egress hosts, IPs or CIDRs, comma-separated (orch up: --allow).",
)
UID = Setting(
    "ORCH_UID",
    "",
    parse.optional_whole,
    "compose.yaml: the uid of the run's controller and workers in the container (orch up: yours).",
    shown="`1000` (compose.yaml)",
)
WORKERS = Setting("ORCH_WORKERS", "1", parse.whole, "compose.yaml: how many workers the fleet service starts.")
AGENT = Setting("ORCH_AGENT", DEFAULT_AGENT, parse.text, "compose.yaml: the workers' agent.")
PERMISSION_MODE = Setting(
    "ORCH_PERMISSION_MODE",
    "",
    parse.optional,
    "compose.yaml: the workers' permission mode.",
    shown="the agent's default",
)
MODEL = Setting("ORCH_MODEL", "", parse.optional, "compose.yaml: the workers' model.", shown="the agent's default")
OFFLINE = Setting(
    "ORCH_OFFLINE",
    "0",
    parse.flag,
    "compose.yaml: 1 drives the workers with orch's scripted model server (no model API).",
)
# compose.yaml's own, not read by orch.
RUN = Setting(
    "ORCH_RUN", "demo", parse.text, "compose.yaml: the run's name (in a worker's own environment: its run folder)."
)
CREDENTIALS = Setting(
    "ORCH_CREDENTIALS",
    "/dev/null",
    parse.text,
    "compose.yaml: a file of model API credentials (`ANTHROPIC_API_KEY=...` lines), mounted as a secret that "
    "only the container's init reads (for the gateway); it must not be readable by ORCH_UID.",
    shown="none",
)
SPEC = Setting("ORCH_SPEC", "/workspace/fleet.yaml", parse.text, "compose.yaml: the fleet spec the lead service runs.")
RUNS = Setting(
    "ORCH_RUNS",
    "runs",
    parse.text,
    "compose.yaml: the run folders: a named volume, or a host path.",
    shown="volume `runs`",
)
WORKSPACE = Setting(
    "ORCH_WORKSPACE",
    "workspace",
    parse.text,
    "compose.yaml: the workdir: a named volume, or a host path.",
    shown="volume `workspace`",
)

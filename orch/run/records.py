"""Messages are models: what orch writes to and reads from the run folder."""

from __future__ import annotations

import datetime as dt
import importlib
import re
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, Literal, Self, TypeAlias, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
    model_validator,
)

from orch.run.events import Event
from orch.settings import limits
from orch.settings.user import WORKER_UID_BASE


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Strict(BaseModel):
    """The base of every record orch writes or reads strictly: unknown keys are errors (the spec, jobs,
    findings and reports use it too). A field's docstring documents it for the reader of the source only:
    nothing prints a JSON schema, and pydantic's `use_attribute_docstrings` re-parsed each model's source
    at import, a sixth of the start of every `orch` process (bench/README.md, "Process starts")."""

    model_config = ConfigDict(extra="forbid")


class Isolation(StrEnum):
    """How far the run's workers are kept apart (SECURITY.md: "Workers that lie on purpose")."""

    STRICT = "strict"
    """Each worker its own uid (orch.run.uids), writing only its own outbox; the controller and the gateway
    other uids; the tree under audit read-only. The container backend only."""
    SHARED = "shared"
    """Workers and controller share one uid: a worker can write what another worker or the controller
    writes. Local runs, and runs whose workers edit the tree (fixers, scribes, ad-hoc `orch up`)."""


class RunStatus(StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    STOPPED = "stopped"
    FAILED = "failed"


class EgressMode(StrEnum):
    """What a run's container may reach on the network (`orch up --egress`)."""

    OPEN = "open"
    ALLOWLIST = "allowlist"
    NONE = "none"


class ContainerOptions(Strict):
    """How a run's container is confined. Kept in run.json so `orch up --resume` recreates it alike."""

    egress: EgressMode = EgressMode.ALLOWLIST
    allow: list[str] = Field(default_factory=list)
    """The resolved allowlist: defaults plus `--allow` (host names, IPs or CIDRs; names resolved at boot)."""
    memory: str = limits.CONTAINER_MEMORY
    cpus: float = limits.CONTAINER_CPUS
    pids: int = limits.CONTAINER_PIDS
    network: str | None = None
    """A Docker network to join (None: the engine's default bridge)."""
    copy_workdir: bool = False
    """`--copy`: the workers got a disposable copy of the workdir, never the original."""
    worker_uid_base: int | None = None
    """Strict isolation: worker N's uid in the container is this + N (orch.run.uids.range_base: a range of the
    run's own, chosen at `orch up`, kept for a resume: the run folder's files are those uids'). None: a run from
    before ranges, on ORCH_WORKER_UID_BASE."""

    def uid_base(self) -> int:
        """ORCH_WORKER_UID_BASE in the run's container."""
        return WORKER_UID_BASE.get() if self.worker_uid_base is None else self.worker_uid_base


class ContainerInfo(Strict):
    """Where a containerised run lives, as the host (the machine running `orch`) sees it.

    Host paths vs container paths: `RunInfo.workdir` and every path orch writes *inside* the run folder
    (briefs' protocol footer, hook commands) are as seen inside the container (`/workspace`,
    `/orch/runs/<name>`), because the controller and the workers live there. What the host needs to find
    the same things is kept here: `host_run_dir` and `host_workdir`.
    """

    # run.json keeps the key `remote` (files written before the field was renamed load alike).
    model_config = ConfigDict(extra="forbid", validate_by_name=True, serialize_by_alias=True)

    id: str = ""
    """Container id ("" until the container is created)."""
    name: str
    image: str
    docker_host: str | None = None
    """The engine the container runs on (None: the default local engine)."""
    on_remote_engine: bool = Field(default=False, validation_alias="remote", serialization_alias="remote")
    """The engine is on another machine: the run folder is the volume `run_volume` there, not a bind mount."""
    host_run_dir: str
    """The run folder as the engine's host sees it (the bind-mount source), or the volume name on a remote engine."""
    host_workdir: str = ""
    """The workdir the user named, on the machine that ran `orch up`."""
    workspace_source: str = ""
    """What is mounted at the container's workdir: a host path (the workdir or its copy) or a volume name."""
    run_volume: str | None = None
    user: str = "1000:1000"
    """uid:gid the controller and the workers run as (the owner of files they write to the run folder)."""
    options: ContainerOptions = Field(default_factory=ContainerOptions)
    last_pull: dt.datetime | None = None
    """When `orch pull` last copied the remote run folder back."""


SIZE_RE = r"^\s*(\d+)\s*([kmgt]?)i?b?\s*$"
SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def byte_size(value: object) -> object:
    """`512m`, `2g`, `2GiB` or a number of bytes, as Docker's `--memory` reads them (binary units);
    `off` (or None) for no cap. Anything else is left for pydantic to refuse."""
    if isinstance(value, str):
        if value.strip().lower() in ("off", "none", ""):
            return None
        match = re.match(SIZE_RE, value.lower())
        if match:
            return int(match.group(1)) * SIZE_UNITS[match.group(2)]
    return value


_SIZE_TEXT = {"type": "string", "pattern": r"^\s*(\d+\s*[kKmMgGtT]?[iI]?[bB]?|[oO][fF][fF]|[nN][oO][nN][eE])\s*$"}
"""What `byte_size` reads, for the JSON Schema of a fleet spec (`orch spec schema`): 512m, 2g, 2GiB, off."""


def _size_schema(least: int) -> WithJsonSchema:
    return WithJsonSchema({"anyOf": [{"type": "integer", "minimum": least}, _SIZE_TEXT, {"type": "null"}]})


Size = Annotated[Annotated[int, Field(ge=1 << 20)] | None, BeforeValidator(byte_size), _size_schema(1 << 20)]
"""At least 1 MiB, or None (`off`)."""
Count = Annotated[Annotated[int, Field(ge=16)] | None, BeforeValidator(byte_size), _size_schema(16)]


class WorkerCaps(Strict):
    """What one worker may use (SECURITY.md, "Caps"), kept in run.json: the panes start under them and
    the controller's watchdog (orch.fleet.watchdog) checks them. None: no cap."""

    pids: Count = limits.WORKER_PIDS
    """Processes and threads of the worker (RLIMIT_NPROC of its uid under strict isolation in a container;
    elsewhere counted by the watchdog)."""
    memory: Size = byte_size(limits.WORKER_MEMORY)  # type: ignore[assignment]
    """Resident memory of all the worker's processes together (the watchdog: the engine gives no cgroup)."""
    disk: Size = byte_size(limits.WORKER_DISK)  # type: ignore[assignment]
    """Bytes of the files the worker wrote; also RLIMIT_FSIZE, each file's cap, enforced by the kernel."""
    run_folder: Size = byte_size(limits.RUN_FOLDER_MAX)  # type: ignore[assignment]
    """The whole run folder (the watchdog stops the biggest writer past it)."""

    @classmethod
    def off(cls) -> WorkerCaps:
        return cls(pids=None, memory=None, disk=None, run_folder=None)


class RunInfoBase(Strict):
    """`run.json`: what was asked for, and where it runs. Each backend has its variant of it, named by `backend`
    (orch.backends.registry): `LocalRunInfo`, `DockerRunInfo`, or one a backend's own package defines; a
    variant holds that backend's settings and nothing of another's (`RUN_RECORDS`)."""

    name: str
    backend: str
    """The backend's registered name (orch.backends.registry.BACKENDS)."""
    agent: str
    workers: int
    workdir: str
    """The workers' working directory as seen where they run (`/workspace` in a container)."""
    permission_mode: str
    model: str | None = None
    worker_models: dict[int, str] = Field(default_factory=dict)
    """Per-worker model where it differs from `model`."""
    worker_agents: dict[int, str] = Field(default_factory=dict)
    """Per-worker agent where it differs from `agent` (a mixed fleet)."""
    offline: bool = False
    credential: str | None = None
    """How the run's gateway presents the user's credential upstream (orch.gateway.modeldir.Scheme):
    `passthrough` means the workers hold the agent's own login; None: not started yet (or an old run)."""
    replay: str | None = None
    """The cassette the run's gateway answers from (`orch run --replay`): no upstream, nothing billed."""
    isolation: Isolation = Isolation.SHARED
    caps: WorkerCaps = Field(default_factory=WorkerCaps)
    """Per-worker caps on processes, memory and disk, and the run folder's cap (orch.fleet.caps)."""
    writers: bool = False
    """An `orch run` with writer tasks: its folder has `worktrees/` (one per worker) and `changes/`."""
    tmux_socket: str
    created: dt.datetime = Field(default_factory=utcnow)
    status: RunStatus = RunStatus.STARTING
    orch_version: str
    agent_version: str | None = None
    agent_versions: dict[str, str | None] = Field(default_factory=dict)
    """Each agent's CLI version where its workers ran, set at launch (`orch record export` keeps it)."""

    @property
    def where(self) -> str:
        """Where its fleet runs, for messages."""
        return self.backend

    @classmethod
    def of(cls, info: RunInfoBase, **own: Any) -> Self:
        """`info`'s fields every run has (a planned run, or one read elsewhere) as this variant, with its own
        fields `own` (a container run's `container`): nothing of another variant's comes along."""
        common = info.model_dump(include=set(RunInfoBase.model_fields) - {"backend"})
        return cls(**common, **own)

    def agent_of(self, n: int) -> str:
        """Worker n's agent."""
        return self.worker_agents.get(n, self.agent)

    def agents(self) -> list[str]:
        """Every agent of the run (names), `agent` first."""
        return list(dict.fromkeys([self.agent, *self.worker_agents.values()]))

    def _counted(self) -> str:
        counts = [sum(1 for n in range(1, self.workers + 1) if self.agent_of(n) == k) for k in self.agents()]
        return " + ".join(f"{c} {k}" for c, k in zip(counts, self.agents(), strict=True))

    def fleet(self) -> str:
        """The fleet in a few words: `3 claude worker(s)`, or `2 claude + 1 codex worker(s)`."""
        return f"{self._counted()} worker(s)"

    def mix(self) -> str:
        """Its agents, where one name stood before mixed fleets (a view's header): `claude`, `2 claude + 1 codex`."""
        return self._counted() if len(self.agents()) > 1 else self.agent


class LocalRunInfo(RunInfoBase):
    """A run whose tmux server is on the machine that started it (`orch up --local`, or made inside a container)."""

    backend: Literal["local"] = "local"
    egress_allow: list[str] | None = None
    """Strict isolation: the `host:port` names its workers may CONNECT to through the relay's proxy
    (`--egress allowlist`, orch.backends.local.egressproxy); None: no network but the gateway (`--egress none`)."""

    @model_validator(mode="before")
    @classmethod
    def _no_container(cls, data: Any) -> Any:
        """run.json of older versions says `"container": null` for a local run."""
        if isinstance(data, dict) and "container" in data and data["container"] is None:
            return {k: v for k, v in data.items() if k != "container"}
        return data


class DockerRunInfo(RunInfoBase):
    """A run in its own container."""

    backend: Literal["docker"] = "docker"
    container: ContainerInfo

    @property
    def where(self) -> str:
        return f"container {self.container.name}"


RunInfo: TypeAlias = RunInfoBase
"""A run's record: the variant of its backend."""

RUN_RECORDS: dict[str, type[RunInfoBase]] = {"local": LocalRunInfo, "docker": DockerRunInfo}
"""Each backend's variant of run.json by its name: these because every layer reads them (a run's container its
`DockerRunInfo` before any backend code runs); a backend's own package adds its variant when it loads."""
RECORD_FINDERS: list[Callable[[str], None]] = []
"""Called with a backend's name RUN_RECORDS lacks: orch.backends.registry loads it (its package adds its variant)."""
RECORD_FINDER_MODULE = "orch.backends.registry"
"""The module that adds its finder to RECORD_FINDERS when imported: imported by name on a backend RUN_RECORDS
lacks, so a process that never imported it (a reader of run folders alone) still reads every backend's run.json.
By name, because it sits above this layer."""


class RunRecords:
    """Reads run.json into the variant of its backend: a pydantic union discriminated on `backend` over
    RUN_RECORDS as it is when read (a backend loaded later adds its variant), each variant strict."""

    def __init__(self) -> None:
        self._made: tuple[tuple[type[RunInfoBase], ...], TypeAdapter[RunInfoBase]] | None = None

    def adapter(self) -> TypeAdapter[RunInfoBase]:
        variants = tuple(RUN_RECORDS.values())
        if self._made is None or self._made[0] != variants:
            union: Any = Union[variants]  # noqa: UP007 (a union of the variants registered now)
            self._made = (variants, TypeAdapter(Annotated[union, Field(discriminator="backend")]))
        return self._made[1]

    def validate_json(self, text: str | bytes) -> RunInfoBase:
        try:
            return self.adapter().validate_json(text)
        except ValidationError as exc:
            error = exc.errors()[0]
            if error["type"] != "union_tag_invalid":
                raise
            importlib.import_module(RECORD_FINDER_MODULE)  # adds its finder, once
            for find in RECORD_FINDERS:  # a backend not loaded yet: its package adds its variant
                find(str(error.get("ctx", {}).get("tag")))
            return self.adapter().validate_json(text)  # still unknown: pydantic's error names the backends there are


RUN_INFO = RunRecords()
"""Reads run.json into the record of its backend."""


class WorkerState(StrEnum):
    BOOTING = "booting"
    IDLE = "idle"
    BUSY = "busy"
    WAITING_FOR_PERMISSION = "waiting-for-permission"
    RATE_LIMITED = "rate-limited"
    ERROR = "error"
    EXITED = "exited"
    CRASHED = "crashed"


class HookEvent(BaseModel):
    """One line of `state/agent-<n>.jsonl`: a hook payload from the agent, stamped by orch."""

    model_config = ConfigDict(extra="allow")

    ts: float
    hook_event_name: str
    session_id: str | None = None
    prompt: str | None = None
    tool_name: str | None = None
    notification_type: str | None = None
    error: str | None = None
    reason: str | None = None
    status: int | None = None
    """Exit status, on the wrapper's ProcessExit event."""
    orch_decision: str | None = None
    """On PermissionRequest: "allow" or "deny" when the hook answered from the run's policy (no dialog)."""

    def unanswered(self) -> bool:
        """A permission dialog left on screen for a person: the run's policy gave no answer (no policy file,
        or `report`). The worker's state is then waiting-for-permission, and a person is notified."""
        if self.hook_event_name == "PermissionRequest":
            return not self.orch_decision
        return self.hook_event_name == "Notification" and self.notification_type == "permission_prompt"


class PermissionAnswer(Strict):
    """`state/permissions.json`: how the workers' PermissionRequest hook answers a prompt (orch.run.hookwriter)."""

    answer: Literal["allow", "deny", "ask"]
    """allow or deny the tool call without a dialog; ask: show the dialog and wait for a human."""
    message: str | None = None
    """Told to the agent with a deny."""


class StatusLine(BaseModel):
    """`outbox/agent-<n>/status.json`: the latest status-line payload (cost feed)."""

    model_config = ConfigDict(extra="allow")

    ts: float
    session_id: str | None = None
    cost_usd: float | None = None
    duration_ms: int | None = None
    context_used_percent: float | None = None


class BusLine(Strict):
    """One bus message. On disk: `<ISO timestamp> [W3] text`, one line, newlines escaped."""

    ts: dt.datetime
    """When it was posted (UTC)."""
    sender: str
    """`W3` for worker 3, `lead` for the lead/controller."""
    text: str
    """The message, newlines escaped as on disk (`\\n`)."""


class ControllerEvent(Strict):
    """One line of `events.jsonl`: something the controller (or the fleet, or the container) did."""

    ts: dt.datetime = Field(default_factory=utcnow)
    event: Event
    worker: int | None = None
    data: dict[str, Any] = Field(default_factory=dict)

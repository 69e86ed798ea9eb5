"""Messages are models: what orch writes to and reads from the run folder."""

from __future__ import annotations

import datetime as dt
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Backend(StrEnum):
    LOCAL = "local"
    DOCKER = "docker"


class RunStatus(StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    STOPPED = "stopped"
    FAILED = "failed"


class ContainerInfo(Strict):
    """Where a containerised run lives."""

    id: str
    name: str
    image: str
    docker_host: str | None = None
    """The engine the container runs on (None: the default local engine)."""
    host_run_dir: str
    """The run folder as the engine's host sees it (the bind-mount source)."""


class RunInfo(Strict):
    """`run.json`: what was asked for, and where it runs."""

    name: str
    backend: Backend
    agent: str
    workers: int
    workdir: str
    permission_mode: str
    model: str | None = None
    offline: bool = False
    tmux_socket: str
    created: dt.datetime = Field(default_factory=utcnow)
    status: RunStatus = RunStatus.STARTING
    orch_version: str
    agent_version: str | None = None
    container: ContainerInfo | None = None


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


class StatusLine(BaseModel):
    """`state/agent-<n>.status.json`: the latest status-line payload (cost feed)."""

    model_config = ConfigDict(extra="allow")

    ts: float
    session_id: str | None = None
    cost_usd: float | None = None
    duration_ms: int | None = None
    context_used_percent: float | None = None


class BusLine(Strict):
    """One bus message. On disk: `<ISO timestamp> [W3] text`, one line, newlines escaped."""

    ts: dt.datetime
    sender: str
    """`W3` for worker 3, `lead` for the lead/controller."""
    text: str


class WorkerStatus(Strict):
    """What `orch status` shows for one worker."""

    worker: int
    state: WorkerState
    detail: str | None = None
    done: bool
    result: bool
    last_bus: str | None = None
    cost_usd: float | None = None
    pane_id: str | None = None


class RunStatusView(Strict):
    name: str
    backend: Backend
    agent: str
    status: RunStatus
    alive: bool
    workers: list[WorkerStatus]


class ControllerEvent(Strict):
    """One line of `events.jsonl`: something the controller did."""

    ts: dt.datetime = Field(default_factory=utcnow)
    event: str
    worker: int | None = None
    data: dict[str, Any] = Field(default_factory=dict)

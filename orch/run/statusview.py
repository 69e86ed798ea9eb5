"""What `orch status` and `orch ls` show of a run (and `--json` prints, docs/outputs.md): its state, outcome, end
and cost; each worker's state, jobs and what each came to. Filled from the run's folder by the sandboxes
(`Sandbox.status`), orch.fleet.control and orch.report.runstatus."""

from __future__ import annotations

import datetime as dt

from pydantic import Field

from orch.run.records import RunStatus, Strict, WorkerState


class WorkerJob(Strict):
    """One job a worker had in an `orch run` (`orch status`)."""

    job: str
    role: str
    status: str
    """pending, running, done, failed or cancelled."""
    result: str | None = None
    """What it came to: `1 finding`, a verdict (CONFIRMED, REFUTED...), a change's status (LANDED...)."""
    result_file: str | None = None
    """Its result (jobs/JOB.result.md), relative to the run folder, once the controller kept it."""


class RunOutcome(Strict):
    """How an `orch run` ended (orch/exitcodes.py): what `orch status` and `orch ls` show."""

    status: str
    exit_code: int
    reason: str


class WorkerStatus(Strict):
    """What `orch status` shows for one worker."""

    worker: int
    agent: str | None = None
    """Its agent (None: a view written before mixed fleets)."""
    state: WorkerState
    detail: str | None = None
    done: bool
    result: bool
    last_bus: str | None = None
    cost_usd: float | None = None
    rate_limited_until: float | None = None
    """Epoch seconds: the model API said to retry then (the run's model gateway saw a 429/529)."""
    pane_id: str | None = None
    jobs: list[WorkerJob] = Field(default_factory=list)
    """An `orch run`: its jobs, in the order it had them."""
    out: str | None = None
    """An `orch run`: why the controller gave it no more jobs."""


class RunStatusView(Strict):
    name: str
    backend: str
    agent: str
    status: RunStatus
    alive: bool
    workers: list[WorkerStatus]
    started: dt.datetime | None = None
    finished: dt.datetime | None = None
    """An `orch run`'s end, or when an `orch up` run was killed."""
    outcome: RunOutcome | None = None
    """An `orch run` that has ended."""
    cost_usd: float | None = None
    """The whole run's (the gateway's count, else the agents' status lines; 0 before any model traffic)."""
    billed: bool | None = None
    """False: nothing was charged (offline, replayed); None: no gateway counted it."""
    unbilled: str | None = None
    """Why nothing was billed (offline, replayed, no model traffic), to show beside the cost (modeldir.run_cost)."""

"""A run at one moment, for `orch watch`: its workers, verification matrix, progress, commentary and bus.

Built from the run folder alone (run.json, the workers' hook logs, controller.json, fleet.json, the
gateway's usage.json, events.jsonl and bus.md), never by polling tmux: it works the same for a local run,
a container run (the folder is bind-mounted here) and a run on a remote engine (its pulled folder). The
`Watcher` reads the append-only files incrementally and re-reads the others only when they change, so a
snapshot of a busy 32-worker run costs a few stat calls.

Everything here is read from files a worker may write (hook logs, bus lines, status lines): texts are
shortened to one line and numbers come from orch's own records (the controller's books, the gateway's
usage), never from a worker's say-so.
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from orch import escape
from orch.errors import NotFoundError, OrchError
from orch.gateway.modeldir import UsageSnapshot, read_usage, run_cost
from orch.jobs.state import ControllerState, JobStatus, load_state
from orch.jobs.verification import finding_status
from orch.lead.changes.status import live_lines
from orch.lead.controller import read_spec
from orch.notify.decide import Decider
from orch.notify.follow import muted
from orch.notify.notice import Notice
from orch.report.charts import CostPoint, JobBar, job_bars, job_costs
from orch.report.commentary import describe
from orch.run.events import Event
from orch.run.files import JsonlTail
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent, HookEvent, RunInfo, RunStatus, Strict, WorkerState
from orch.run.statusline import read_status_line
from orch.spec.model import FleetSpec
from orch.view.readers import KEEP_LINES, BusEntry, BusTail, Changed, worker_state

CLAIM_CHARS = 90
NEEDS_SHOWN = 20
FINISHED = (Event.FINISHED, Event.ABORTED, Event.KILLED)


class WorkerTile(Strict):
    n: int
    agent: str
    model: str | None = None
    state: WorkerState
    detail: str | None = None
    since: float | None = None
    """When the worker entered this state (the hook event that put it there)."""
    job: str | None = None
    role: str | None = None
    cost_usd: float | None = None
    """From the gateway's usage (exact), else the agent's status line, else unknown."""
    last_bus: str | None = None
    done: bool = False
    out: str | None = None
    """Why the controller gives it no more jobs."""


class MatrixCell(Strict):
    verifier: int | None
    round: int
    verdict: str
    """CONFIRMED, REFUTED, UNVERIFIABLE, PENDING, FAILED, CANCELLED."""


class MatrixRow(Strict):
    finding: str
    claim: str
    finder: int
    status: str
    cells: list[MatrixCell] = Field(default_factory=list)


class Progress(Strict):
    jobs_done: int = 0
    jobs_failed: int = 0
    jobs_total: int = 0
    findings: int = 0
    confirmed: int = 0
    refuted: int = 0
    cost_usd: float | None = None
    """The whole run's (orch.gateway.modeldir.run_cost): 0 before any model traffic."""
    unbilled: str | None = None
    """Why nothing was billed (offline, replayed, no model traffic), shown beside the cost."""
    budget_usd: float | None = None
    started: float | None = None
    deadline: float | None = None
    """When `timeouts.run` runs out."""
    finished: float | None = None
    outcome: str | None = None
    """passed, findings, incomplete or failed (orch/exitcodes.py), once the controller has decided."""


class Line(Strict):
    ts: float
    text: str
    worker: int | None = None


class Snapshot(Strict):
    """`orch watch --json`: a run at one moment (also what `orch watch --web` streams)."""

    schema_version: Literal[1] = 1
    run: str
    backend: str
    agent: str
    """The run's agents: `claude`, or a mixed fleet's `2 claude + 1 codex` (RunInfo.mix)."""
    status: RunStatus
    taken: float
    gone: bool = False
    """The run folder vanished while watched: what is shown is the last that was seen."""
    lead: bool = False
    """An `orch run` (a controller keeps books): jobs, the matrix and progress mean something."""
    workers: list[WorkerTile]
    matrix: list[MatrixRow] = Field(default_factory=list)
    changes: list[str] = Field(default_factory=list)
    """Each change of a run with writers, where it is (orch.lead.changes.status.live_lines): the queue."""
    progress: Progress = Field(default_factory=Progress)
    timeline: list[JobBar] = Field(default_factory=list)
    costs: dict[int, list[CostPoint]] = Field(default_factory=dict)
    commentary: list[Line] = Field(default_factory=list)
    bus: list[BusEntry] = Field(default_factory=list)
    needs: list[Notice] = Field(default_factory=list)
    """What needs a person now, newest first (orch.notify.decide: the notices a notifier sends, still open)."""
    muted: bool = False
    """`orch notify mute`: the run sends no notification (the list still shows)."""

    @property
    def ended(self) -> bool:
        return self.gone or self.status in (RunStatus.STOPPED, RunStatus.FAILED) or self.progress.outcome is not None


class Watcher:
    """Keeps the readers of one run folder and makes a Snapshot on demand (cheap when little changed)."""

    def __init__(self, run: RunFolder) -> None:
        self.run = run
        self.info: RunInfo = run.info()  # NotFoundError for an unknown run, before anything starts
        self._info_file = Changed(run.run_json)
        self._state_file = Changed(run.controller_state)
        self._usage_file = Changed(run.model_usage)
        self._events = JsonlTail(run.events, ControllerEvent)
        self._seen_events = 0
        self._bus = BusTail(run.bus)
        self.state: ControllerState | None = None
        self.spec: FleetSpec | None = None
        self.usage: UsageSnapshot | None = None
        self.commentary: deque[Line] = deque(maxlen=KEEP_LINES)
        self.costs: dict[int, list[CostPoint]] = {}
        self.finished_event = False
        self._states: dict[int, tuple[tuple[int, bool], tuple[WorkerState, str | None, float | None]]] = {}
        """Worker n's state, its detail made safe to show and since when, as of (its hook events, running)."""
        self._done_flags: dict[int, Path] = {}
        self._status_lines: dict[int, tuple[Path, tuple[int, int, int] | None, float | None]] = {}
        """Worker n's status line: its path, the file as last seen (inode, mtime, size) and the cost read then."""
        self._hooks: dict[int, JsonlTail[HookEvent]] = {}
        self._hooks_decided: dict[int, int] = {}
        agents = {n: self.info.agent_of(n) for n in range(1, self.info.workers + 1)}
        self.needs = Decider(run, agents, controlled=run.fleet_spec.exists())
        self.last: Snapshot | None = None

    def _reload(self) -> None:
        if self._info_file.moved():
            try:
                self.info = self.run.info()
            except OrchError:
                if not self.run.root.exists():
                    raise
        if self._state_file.moved():
            try:
                self.state = load_state(self.run)
            except OrchError:
                self.state = None  # not (yet) an `orch run`, or a file of another version
            if self.state is not None and self.spec is None:
                try:
                    self.spec = read_spec(self.run)
                except OrchError:
                    self.spec = None
        if self._usage_file.moved():
            self.usage = read_usage(self.run)
            if self.usage is not None:
                for n, counted in self.usage.workers.items():
                    points = self.costs.setdefault(n, [])
                    if not points or points[-1].usd != counted.cost_usd:
                        points.append(CostPoint(ts=self.usage.updated, usd=counted.cost_usd))
        events = self._events.records()
        for event in events[self._seen_events :]:
            self.needs.controller(event)
            if event.event in FINISHED:
                self.finished_event = True
            text = describe(event)
            if text is not None:
                self.commentary.append(
                    Line(ts=event.ts.timestamp(), worker=event.worker, text=escape.terminal(text, 200))
                )
        self._seen_events = len(events)
        self._bus.read()

    def snapshot(self) -> Snapshot:
        """The run now; NotFoundError once its folder is gone (the last snapshot stays in `last`)."""
        if not self.run.root.is_dir():
            raise NotFoundError(f"run folder {self.run.root} vanished", hint="the run was removed while watched")
        try:
            self._reload()
        except FileNotFoundError as exc:
            raise NotFoundError(f"run folder {self.run.root} vanished", hint="the run was removed") from exc
        except ValidationError:  # pragma: no cover - a record of another orch version
            pass
        info, state = self.info, self.state
        running = info.status in (RunStatus.STARTING, RunStatus.RUNNING)
        books = {b.n: b for b in state.workers} if state else {}
        jobs = {j.id: j for j in state.jobs} if state else {}
        tiles = []
        costs = {n: self._cost(n) for n in range(1, info.workers + 1)}
        for n in range(1, info.workers + 1):
            events = self._hook_log(n).records()
            for event in events[self._hooks_decided.get(n, 0) :]:
                self.needs.hook(n, event)
            self._hooks_decided[n] = len(events)
            seen = self._states.get(n)
            if seen is None or seen[0] != (len(events), running):  # the state moves only with a new event
                st, detail, since = worker_state(events, running)
                seen = ((len(events), running), (st, escape.terminal(detail, 60) if detail else None, since))
                self._states[n] = seen
            st, detail, since = seen[1]
            book = books.get(n)
            job = jobs.get(book.job) if book and book.job else None
            tiles.append(
                WorkerTile(
                    n=n,
                    agent=book.agent if book else info.agent_of(n),
                    model=(book.model if book else None) or info.worker_models.get(n) or info.model,
                    state=st,
                    detail=detail,
                    since=since,
                    job=job.id if job else None,
                    role=job.role.value if job else None,
                    cost_usd=costs[n],
                    last_bus=self._bus.last_clean(f"W{n}"),
                    done=self._done_flag(n).exists(),
                    out=escape.terminal(book.dead, 120) if book and book.dead else None,
                )
            )
        matrix = self._matrix()
        snap = Snapshot(
            run=info.name,
            backend=info.backend,
            agent=info.mix(),
            status=info.status,
            taken=time.time(),
            lead=state is not None,
            workers=tiles,
            matrix=matrix,
            changes=live_lines(state) if state is not None else [],
            progress=self._progress(matrix, costs),
            timeline=self._timeline(),
            costs=self._costs(),
            commentary=list(self.commentary),
            bus=list(self._bus.lines),
            needs=self._needs(),
            muted=muted(self.run),
        )
        self.last = snap
        return snap

    def _needs(self) -> list[Notice]:
        self.needs.due(time.time())
        return list(reversed(self.needs.open.values()))[:NEEDS_SHOWN]

    def _costs(self) -> dict[int, list[CostPoint]]:
        """Each worker's cost over time: steps at its jobs' ends (a lead run), then what this view saw change."""
        series = job_costs(self.state, self.usage) if self.state is not None else {}
        for n, seen in self.costs.items():
            points = series.setdefault(n, [])
            points += [p for p in seen if not points or p.ts > points[-1].ts]
        return series

    def _hook_log(self, n: int) -> JsonlTail[HookEvent]:
        if n not in self._hooks:
            self._hooks[n] = JsonlTail(self.run.state(n), HookEvent)
        return self._hooks[n]

    def _done_flag(self, n: int) -> Path:
        if n not in self._done_flags:
            self._done_flags[n] = self.run.done(n)
        return self._done_flags[n]

    def _cost(self, n: int) -> float | None:
        if self.usage is not None:
            counted = self.usage.workers.get(n)
            return counted.cost_usd if counted else 0.0
        return self._line_cost(n)

    def _line_cost(self, n: int) -> float | None:
        """Worker n's cost from its status line, read again only when the file changed: at 64 busy workers and 10
        frames a second, reading every status line twice a frame was two thirds of a snapshot's CPU. The file is
        the worker's: a change of inode, time or size (Claude Code's status command replaces it: a new inode each
        time) reads it again, through read_status_line's checks (a link reads as none)."""
        path, seen, cost = self._status_lines.get(n) or (self.run.status_line(n), None, None)
        try:
            st = path.lstat()
            now: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            now = None
        if now is None or now != seen:
            line = read_status_line(path) if now is not None else None
            cost = line.cost_usd if line else None
        self._status_lines[n] = (path, now, cost)
        return cost

    def _matrix(self) -> list[MatrixRow]:
        state, spec = self.state, self.spec
        if state is None or spec is None:
            return []
        rows = []
        for item in state.findings:
            cells = []
            for job in state.jobs_for(item.id):
                accepted = next((v for v in state.verdicts if v.job == job.id), None)
                verdict = accepted.report.verdict.value if accepted else _pending(job.status)
                cells.append(MatrixCell(verifier=job.worker, round=job.round, verdict=verdict))
            rows.append(
                MatrixRow(
                    finding=item.id,
                    claim=escape.terminal(item.finding.claim, CLAIM_CHARS),
                    finder=item.finder,
                    status=finding_status(state, spec, item.id).value,
                    cells=cells,
                )
            )
        return rows

    def _progress(self, matrix: list[MatrixRow], costs: dict[int, float | None]) -> Progress:
        state, spec, usage = self.state, self.spec, self.usage
        cost, free = run_cost(usage, costs.values(), self.info.offline, self.info.replay is not None)
        if state is None:
            return Progress(cost_usd=cost, unbilled=free)
        statuses = [r.status for r in matrix]
        return Progress(
            unbilled=free,
            jobs_done=sum(1 for j in state.jobs if j.status is JobStatus.DONE),
            jobs_failed=sum(1 for j in state.jobs if j.status is JobStatus.FAILED),
            jobs_total=sum(1 for j in state.jobs if j.status is not JobStatus.CANCELLED),
            findings=len(state.findings),
            confirmed=statuses.count("CONFIRMED"),
            refuted=statuses.count("REFUTED"),
            cost_usd=cost,
            budget_usd=spec.budget.max_cost_usd if spec else None,
            started=state.started,
            deadline=state.started + spec.timeouts.run if spec else None,
            finished=state.finished,
            outcome=state.outcome.status if state.outcome else None,
        )

    def _timeline(self) -> list[JobBar]:
        return job_bars(self.state) if self.state is not None else []


def _pending(status: JobStatus) -> str:
    return {JobStatus.FAILED: "FAILED", JobStatus.CANCELLED: "CANCELLED"}.get(status, "PENDING")

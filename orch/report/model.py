"""The verified result of a run: report.json (the model), report.md and a single-file report.html.

The heart is the verification matrix: one row per claim, one column per worker, each cell the
verdict(s) that worker gave (or "finder"). Per worker: tokens and cost, busy time, jobs, rejected
outputs, and a link to its transcript; tokens and cost also per model and per job. Usage comes from the
model gateway's usage.json (exact, from the API's usage fields); a run without a gateway has only the
cost its agents' status lines reported. This module builds the model from the controller's state;
orch.report.render renders and writes it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Literal

from pydantic import Field

from orch.agents.registry import get_adapter
from orch.gateway.link import has_gateway
from orch.gateway.modeldir import UsageLine, UsageSnapshot, read_usage
from orch.jobs.changes import ChangeRow, change_rows
from orch.jobs.findings import CodeEvidence, CommandEvidence, Evidence, Verdict
from orch.jobs.state import ControllerState, FindingStatus, Job, JobStatus
from orch.jobs.verification import finding_status
from orch.report.charts import CostPoint, JobBar, job_bars, job_costs
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent, Isolation, Strict, WorkerCaps
from orch.spec.model import FailOn, FleetSpec


class Usage(Strict):
    """Tokens and cost of a worker, a model or a job, as the gateway counted them."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0

    @classmethod
    def of(cls, lines: Iterable[UsageLine]) -> Usage:
        out = cls()
        for line in lines:
            out = cls(
                requests=out.requests + line.requests,
                input_tokens=out.input_tokens + line.input_tokens,
                output_tokens=out.output_tokens + line.output_tokens,
                cache_read_tokens=out.cache_read_tokens + line.cache_read_input_tokens,
                cache_write_tokens=out.cache_write_tokens + line.cache_creation_input_tokens,
                cost_usd=out.cost_usd + line.cost_usd,
            )
        return out


class ModelRow(Strict):
    model: str
    usage: Usage


class VerdictCell(Strict):
    job: str
    verifier: int | None
    round: int
    stance: str
    verdict: str
    """CONFIRMED, REFUTED, UNVERIFIABLE, or INVALID (output rejected until the job failed), FAILED,
    CANCELLED, PENDING."""
    reason: str = ""
    evidence: list[str] = Field(default_factory=list)
    flags: list[str] = Field(default_factory=list)
    """Rejected outputs of this verifier on this job (no evidence, false evidence, ...)."""


class FindingRow(Strict):
    id: str
    task: str
    finder: int
    claim: str
    severity: str
    evidence: list[str]
    reproduce: str | None
    status: FindingStatus
    verdicts: list[VerdictCell]
    locations: list[CodeEvidence] = Field(default_factory=list)
    """The evidence as file, line and verbatim quote (report.sarif's locations)."""
    fails: bool = False
    """It keeps the ended run from passing (its Outcome's failing_findings): UNVERIFIED or still pending, or
    CONFIRMED at or above `fail_on`. A failing test in report.junit.xml; a REFUTED finding never is."""


class TaskRow(Strict):
    """A task of the spec (report.sarif's rules)."""

    id: str
    role: str
    title: str | None = None
    goal: str


class WorkerRow(Strict):
    worker: int
    agent: str
    model: str | None
    cost_usd: float | None
    usage: Usage | None = None
    """None without a gateway (then `cost_usd` is the status line's)."""
    rate_limited_until: float | None = None
    busy_seconds: float
    jobs: list[str]
    rejected_outputs: int
    restarts: int
    out: str | None
    transcript: str
    """Its terminal rendered as text (orch.run.terminal), relative to the run folder."""
    terminal_log: str = ""
    """What its pane printed, escapes and all (relative to the run folder)."""


class JobRow(Strict):
    id: str
    role: str
    worker: int | None
    status: str
    seconds: float | None
    corrections: int
    nudges: int
    failure: str | None
    usage: Usage | None = None


ISOLATION_NOTES = {
    Isolation.STRICT: "strict: each worker ran in a sandbox of its own (its own uid in a container, its own "
    "bubblewrap sandbox on this machine) and could write only its own outbox (and a writer its own worktree); the "
    "controller stamped every bus post with its sender; the tree under audit was read-only",
    Isolation.SHARED: "shared: the workers and the controller shared one uid, so a worker could have written "
    "another's outbox, the bus, another's state or the tree; each job's output was still read only from its "
    "worker's outbox (strict isolation is the default unless asked otherwise, or in a container a fleet has aider)",
}
"""What a run's isolation guaranteed, and what it lacked (`orch run` says it at the start, the report at the end)."""
ATTEMPTS = (
    Event.BUS_POST_REFUSED,
    Event.CONNECTIONS_CAPPED,
    Event.PEER_REFUSED,
    Event.WRITE_DENIED,
    Event.LEFTOVER_PROCESSES,
    Event.LEFTOVERS_STOPPED,
    Event.OVER_CAP,
)


def caps_line(caps: WorkerCaps) -> str:
    """`caps: processes 512, memory 2.0 GiB, ...` per worker, and the run folder's."""

    def size(value: int | None) -> str:
        return "off" if value is None else f"{value / (1 << 30):.1f} GiB" if value >= 1 << 30 else f"{value >> 20} MiB"

    pids = "off" if caps.pids is None else str(caps.pids)
    return (
        f"caps per worker: processes and threads {pids}, resident memory {size(caps.memory)}, bytes written "
        f"{size(caps.disk)}; the run folder {size(caps.run_folder)}"
    )


class AttemptRow(Strict):
    """Something a worker tried beyond its own outbox, as the controller saw it (events.jsonl)."""

    worker: int | None
    job: str | None
    kind: str
    detail: str


def across_kinds(state: ControllerState, spec: FleetSpec) -> int | None:
    """How many confirmed findings another agent than the finder's confirmed (None: one agent)."""
    kinds = {b.n: b.agent for b in state.workers}
    if len(set(kinds.values())) < 2:
        return None
    confirmed = {f.id: f.finder for f in state.findings if finding_status(state, spec, f.id) is FindingStatus.CONFIRMED}
    return sum(
        1
        for fid, finder in confirmed.items()
        if any(
            v.finding == fid and v.report.verdict is Verdict.CONFIRMED and kinds.get(v.verifier) != kinds.get(finder)
            for v in state.verdicts
        )
    )


def attempts(run: RunFolder) -> list[AttemptRow]:
    rows = []
    for line in run.events.read_text(errors="replace").splitlines() if run.events.exists() else []:
        try:
            event = ControllerEvent.model_validate_json(line)
        except ValueError:
            continue
        if event.event in ATTEMPTS:
            data = dict(event.data)
            job = data.pop("job", None)
            detail = "; ".join(f"{k}: {v}" for k, v in data.items())
            rows.append(AttemptRow(worker=event.worker, job=job, kind=event.event.value, detail=detail[:500]))
    return rows


class FlagRow(Strict):
    worker: int
    job: str
    role: str
    problems: list[str]


REPORT_VERSION = 1
"""report.json's `schema_version` (and `orch report --json`'s): raised when a key changes meaning or goes."""


class RunReport(Strict):
    schema_version: int = REPORT_VERSION
    """report.json's version (REPORT_VERSION)."""
    run: str
    workdir: str
    """The tree the workers worked in, as they saw it."""
    rounds: str
    """The verification policy: find-verify or find-refute-confirm."""
    offline: bool = False
    """orch's scripted model answered (no model API, nothing billed)."""
    replay_of: str | None = None
    """The recording this run replayed."""
    cost_source: Literal["gateway", "status-line"] = "status-line"
    """Where tokens and cost come from: the model gateway, or (a run without one) the agents' status lines."""
    billed: bool | None = None
    """The gateway's word: False for offline and replayed runs (nothing was charged); None without a gateway."""
    pricing: str | None = None
    total: Usage | None = None
    models: list[ModelRow] = Field(default_factory=list)
    evidence_source: Literal["ledger", "hooks"] = "hooks"
    """Where "a cited command was run" was checked: the gateway's ledger, or the worker-writable hook log."""
    started: dt.datetime
    finished: dt.datetime | None
    seconds: float | None
    exit_code: int | None
    """The run's exit code (orch/exitcodes.py); None until it has an outcome."""
    status: str
    """passed, findings, incomplete or failed (orch/exitcodes.py), or running until the run has an outcome."""
    reason: str
    fail_on: FailOn = FailOn.NEVER
    """Which CONFIRMED findings fail the run (the spec's `fail_on`, or `orch run --fail-on`)."""
    workers: list[WorkerRow]
    findings: list[FindingRow]
    tasks: list[TaskRow] = Field(default_factory=list)
    jobs: list[JobRow]
    flags: list[FlagRow]
    confirmed_across_kinds: int | None = None
    """Confirmed findings at least one of whose confirming verdicts came from another agent than its
    finder's (None: a fleet of one agent)."""
    isolation: str = Isolation.SHARED.value
    caps: str = ""
    """The per-worker caps the run ran under (orch.fleet.caps), in words; "" in reports of older versions."""
    agent_limits: dict[str, list[str]] = Field(default_factory=dict)
    """For each agent of the fleet that has any: what it cannot do and how orch degraded."""
    attempts: list[AttemptRow] = Field(default_factory=list)
    """What workers tried beyond their own outboxes: refused bus posts, refused writes, leftover processes."""
    timeline: list[JobBar] = Field(default_factory=list)
    """Each job's brief and end, for the timeline (reports of older versions have none)."""
    costs: dict[int, list[CostPoint]] = Field(default_factory=dict)
    """Each worker's cost over time, a step at each job's end (with a gateway only)."""
    changes: list[ChangeRow] = Field(default_factory=list)
    """Each writer task's change: LANDED, REJECTED (checks, scope or review), CONFLICT or FAILED."""

    def verifier_columns(self) -> list[int]:
        return [w.worker for w in self.workers]


def _evidence(ev: Evidence) -> str:
    if isinstance(ev, CodeEvidence):
        return f"{ev.cite()}: {' '.join(ev.quote.split())}"
    assert isinstance(ev, CommandEvidence)
    return f"$ {ev.command} (exit {ev.exit_code})"


def _stamp(ts: float | None) -> dt.datetime | None:
    return dt.datetime.fromtimestamp(ts, dt.UTC) if ts is not None else None


def _cell(state: ControllerState, job: Job) -> VerdictCell:
    flags = [f"{p.kind.value}: {p.detail}" for flag in state.flags if flag.job == job.id for p in flag.problems]
    accepted = next((v for v in state.verdicts if v.job == job.id), None)
    if accepted is not None:
        verdict, reason = accepted.report.verdict.value, accepted.report.reason
        evidence = [_evidence(ev) for ev in accepted.report.evidence]
    else:
        verdict = {
            JobStatus.FAILED: "INVALID" if flags else "FAILED",
            JobStatus.CANCELLED: "CANCELLED",
        }.get(job.status, "PENDING")
        reason, evidence = job.failure or "", []
    return VerdictCell(
        job=job.id,
        verifier=job.worker,
        round=job.round,
        stance=job.stance.value if job.stance else "",
        verdict=verdict,
        reason=reason,
        evidence=evidence,
        flags=flags,
    )


def build_report(run: RunFolder, spec: FleetSpec, state: ControllerState) -> RunReport:
    findings = []
    failing = set(state.outcome.failing_findings) if state.outcome is not None else set()
    for item in state.findings:
        cells = [_cell(state, j) for j in state.jobs_for(item.id)]
        status = finding_status(state, spec, item.id)
        findings.append(
            FindingRow(
                id=item.id,
                task=item.task,
                finder=item.finder,
                claim=item.finding.claim,
                severity=item.finding.severity.value,
                evidence=[_evidence(ev) for ev in item.finding.evidence],
                reproduce=item.finding.reproduce,
                status=status,
                verdicts=cells,
                locations=list(item.finding.evidence),
                fails=item.id in failing,
            )
        )
    usage = read_usage(run)
    workers = []
    for book in state.workers:
        mine = [j for j in state.jobs if j.worker == book.n]
        busy = sum((j.ended_at or state.finished or j.sent_at or 0) - j.sent_at for j in mine if j.sent_at)
        line = run.status_line_info(book.n)
        counted = usage.workers.get(book.n) if usage is not None else None
        worker_usage = Usage.of([counted] if counted else []) if usage is not None else None
        workers.append(
            WorkerRow(
                worker=book.n,
                agent=book.agent,
                model=book.model,
                cost_usd=worker_usage.cost_usd if worker_usage else (line.cost_usd if line else None),
                usage=worker_usage,
                rate_limited_until=counted.rate_limited_until if counted else None,
                busy_seconds=round(busy, 1),
                jobs=[j.id for j in mine],
                rejected_outputs=sum(1 for f in state.flags if f.worker == book.n),
                restarts=book.restarts,
                out=book.dead,
                transcript=str(run.transcript(book.n).relative_to(run.root)),
                terminal_log=str(run.log(book.n).relative_to(run.root)),
            )
        )
    jobs = [
        JobRow(
            id=j.id,
            role=j.role.value,
            worker=j.worker,
            status=j.status.value,
            seconds=round(j.ended_at - j.sent_at, 1) if j.ended_at and j.sent_at else None,
            corrections=j.corrections,
            nudges=j.nudges,
            failure=j.failure,
            usage=_job_usage(usage, j.id),
        )
        for j in state.jobs
    ]
    flags = [
        FlagRow(
            worker=f.worker, job=f.job, role=f.role.value, problems=[f"{p.kind.value}: {p.detail}" for p in f.problems]
        )
        for f in state.flags
    ]
    outcome = state.outcome
    return RunReport(
        run=state.run,
        workdir=run.info().workdir,
        rounds=spec.verification.rounds.value,
        offline=spec.offline,
        replay_of=state.replay_of,
        cost_source="gateway" if usage is not None else "status-line",
        billed=usage.billed if usage is not None else None,
        pricing=usage.pricing if usage is not None else None,
        total=Usage.of([usage.total]) if usage is not None else None,
        models=_models(usage),
        evidence_source="ledger" if has_gateway(run) else "hooks",
        started=dt.datetime.fromtimestamp(state.started, dt.UTC),
        finished=_stamp(state.finished),
        seconds=round(state.finished - state.started, 1) if state.finished else None,
        exit_code=outcome.exit_code if outcome else None,
        status=outcome.status if outcome else "running",
        reason=outcome.reason if outcome else "",
        fail_on=spec.fail_on,
        workers=workers,
        findings=findings,
        tasks=[
            TaskRow(id=tid, role=t.role.value, title=t.title, goal=t.goal)
            for t, tid in zip(spec.tasks, spec.task_ids(), strict=True)
        ],
        jobs=jobs,
        flags=flags,
        confirmed_across_kinds=across_kinds(state, spec),
        isolation=run.info().isolation.value,
        caps=caps_line(run.info().caps),
        agent_limits={
            agent: list(limits) for agent in run.info().agents() if (limits := get_adapter(agent).facts.limits)
        },
        attempts=attempts(run),
        timeline=job_bars(state),
        costs=job_costs(state, usage),
        changes=_changes(run, spec, state),
    )


def _changes(run: RunFolder, spec: FleetSpec, state: ControllerState) -> list[ChangeRow]:
    """Each writer task's change; once the run has ended, those that keep it from passing marked `fails`."""
    rows = change_rows(run, spec.writer_tasks())
    open_ = set(state.outcome.failing_changes) if state.outcome is not None else set()
    return [row.model_copy(update={"fails": True}) if row.task in open_ else row for row in rows]


def _job_usage(usage: UsageSnapshot | None, job: str) -> Usage | None:
    if usage is None:
        return None
    return Usage.of(w.by_job[job] for w in usage.workers.values() if job in w.by_job)


def _models(usage: UsageSnapshot | None) -> list[ModelRow]:
    if usage is None:
        return []
    names = sorted({m for w in usage.workers.values() for m in w.by_model})
    return [
        ModelRow(model=m, usage=Usage.of(w.by_model[m] for w in usage.workers.values() if m in w.by_model))
        for m in names
    ]


def load_report(run: RunFolder) -> RunReport:
    return RunReport.model_validate_json(run.report_json.read_text())

"""The controller's saved state (`controller.json`): jobs, workers' books, accepted findings and verdicts.

Saved atomically after every change, so a controller killed at any point resumes from here: a job
that is DONE is never redone, a brief marked SENDING is checked against the worker's hooks before it
is sent again, and every accepted verdict is kept (with its parsed content) even if its file changes.
"""

from __future__ import annotations

import secrets
import time
from enum import StrEnum

from pydantic import Field

from orch.errors import UsageError
from orch.jobs.findings import Finding, Problem, Reproduction, VerdictReport
from orch.run.files import atomic_write, read_model
from orch.run.folder import RunFolder
from orch.run.records import Strict
from orch.spec.model import Role

STATE_VERSION = 1


class JobStatus(StrEnum):
    PENDING = "pending"
    SENDING = "sending"
    """The brief is being delivered (written before the send; a resumed controller checks the hooks)."""
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL = (JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED)


class Stance(StrEnum):
    VERIFY = "verify"
    REFUTE = "refute"
    CONFIRM = "confirm"


class FindingStatus(StrEnum):
    PENDING = "pending"
    CONFIRMED = "CONFIRMED"
    REFUTED = "REFUTED"
    UNVERIFIED = "UNVERIFIED"


class Job(Strict):
    id: str
    role: Role
    task: str | None = None
    """The spec task (task jobs)."""
    finding: str | None = None
    """The finding under verification (verification jobs)."""
    round: int = 1
    """1 finds (or fixes/writes), 2 verifies or refutes, 3 confirms the survivors."""
    stance: Stance | None = None
    pin: int | None = None
    worker: int | None = None
    status: JobStatus = JobStatus.PENDING
    sent_at: float | None = None
    """When the brief was (about to be) sent: hooks and files older than this are not this job's."""
    last_prompt_at: float | None = None
    ended_at: float | None = None
    corrections: int = 0
    nudges: int = 0
    rate_waits: int = 0
    send_attempts: int = 0
    handled_event_ts: float = 0.0
    """The newest rate-limit hook event already acted on."""
    permissions_seen: float = 0.0
    """The newest permission prompt (its hook event's time) already logged."""
    continue_at: float | None = None
    """When to tell a rate-limited worker to continue."""
    problems: list[Problem] = Field(default_factory=list)
    """What was wrong with the last output (repeated in nudges until fixed)."""
    failure: str | None = None
    change: str | None = None
    """The change under review (review jobs): its id, the writer job that made it."""
    rebase_of: str | None = None
    """Writer jobs: the change this job redoes at a newer integration head (a rebase job)."""
    workdir: str | None = None
    """Where the job works, when not the run's workdir: a writer's fresh worktree, a reviewer's checkout."""
    base: str | None = None
    """Writer jobs: the commit its worktree was checked out at."""

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


class WorkerBook(Strict):
    n: int
    agent: str
    model: str | None = None
    job: str | None = None
    restarts: int = 0
    restart_at: float | None = None
    restarted_at: float | None = None
    """Hook events older than this belong to the previous life of the worker's agent."""
    ended_session: str | None = None
    """The agent session its last fresh start left (a move into a worktree or checkout): that session's late hooks
    are not this life's."""
    dead: str | None = None
    """Why this worker gets no more jobs (restart limit reached)."""
    capped: bool = False
    """Past its budget cap: no new jobs."""
    cwd: str | None = None
    """The directory its agent was last started in, when not the run's workdir (a worktree, a checkout)."""


class AcceptedFinding(Strict):
    id: str
    """Run-wide id: `<task>-<finding id>`."""
    job: str
    task: str
    finder: int
    finding: Finding
    reproduced: Reproduction | None = None
    """orch's run of its `reproduce` command; None until it ended (its verifiers wait), or when it has none."""


class AcceptedVerdict(Strict):
    job: str
    finding: str
    verifier: int
    round: int
    stance: Stance
    report: VerdictReport


class Flag(Strict):
    """Output that was rejected: what the worker claimed, and what was wrong with it."""

    ts: float
    worker: int
    job: str
    role: Role
    problems: list[Problem]


class ChangeStage(StrEnum):
    """Where a writer job's change is: its gate, its reviews, the integration queue, or its end."""

    CHECKING = "checking"
    """Its gate's checks run off the controller's loop (or wait for a slot): a resumed controller runs them again."""
    REVIEW = "review"
    QUEUED = "queued"
    """Approved, in the integration queue (applied, checked and landed one at a time, off the loop)."""
    LANDED = "LANDED"
    REJECTED = "REJECTED"
    CONFLICT = "CONFLICT"
    FAILED = "FAILED"
    UNCHANGED = "UNCHANGED"
    """The writer's job completed and left the tree as it was: nothing to land."""
    REBASING = "REBASING"
    """Sent back to its writer as a rebase job (a newer change of the same task carries on)."""


CHANGE_ENDS = (
    ChangeStage.LANDED,
    ChangeStage.REJECTED,
    ChangeStage.CONFLICT,
    ChangeStage.FAILED,
    ChangeStage.UNCHANGED,
    ChangeStage.REBASING,
)


class ChangeBook(Strict):
    """One change as the controller follows it (its files are `changes/<id>/`, written by orch.lead.changes)."""

    id: str
    """The writer job that made it."""
    task: str
    writer: int
    base: str
    stage: ChangeStage = ChangeStage.REVIEW
    reason: str | None = None
    """Why it did not land: `checks`, `scope` or `review`, then the detail (REJECTED), or the last conflict."""
    rebase_of: str | None = None
    rebases: int = 0
    """Rebase jobs that led to this change."""
    fingerprint: str = ""
    """Its patch's id without context (`git patch-id --stable`): a rebase that keeps it keeps its reviews."""
    reviewed: str | None = None
    """The change whose reviews count for this one (itself, or the change it rebased with the same fingerprint)."""
    commit: str | None = None
    """The landed commit."""
    queued_at: float | None = None
    """When it entered the integration queue: the queue's order."""
    checks_ok: bool = True
    scope: list[str] = Field(default_factory=list)
    """Protected paths it edited without the task's leave."""


class AcceptedReview(Strict):
    job: str
    change: str
    reviewer: int
    report: VerdictReport


class Assignment(Strict):
    job: str
    worker: int


class Outcome(Strict):
    exit_code: int
    status: str
    """passed, findings, incomplete or failed (orch/exitcodes.py: the table)."""
    reason: str
    findings: dict[str, FindingStatus] = Field(default_factory=dict)
    failing_findings: list[str] = Field(default_factory=list)
    """The findings that keep the run from passing (orch.lead.outcome.finding_fails): what report.junit.xml
    fails besides the task jobs."""
    failing_changes: list[str] = Field(default_factory=list)
    """The writer tasks whose change keeps the run from passing (orch.lead.outcome.open_changes)."""


class ControllerState(Strict):
    version: int = STATE_VERSION
    run: str
    nonce: str = Field(default_factory=lambda: secrets.token_hex(4))
    """Makes job tokens unique to this run: files left by an earlier run carry another one."""
    started: float = Field(default_factory=time.time)
    finished: float | None = None
    jobs: list[Job] = Field(default_factory=list)
    workers: list[WorkerBook] = Field(default_factory=list)
    findings: list[AcceptedFinding] = Field(default_factory=list)
    verdicts: list[AcceptedVerdict] = Field(default_factory=list)
    flags: list[Flag] = Field(default_factory=list)
    changes: list[ChangeBook] = Field(default_factory=list)
    reviews: list[AcceptedReview] = Field(default_factory=list)
    aborted: str | None = None
    relaunches: int = 0
    """Times the controller relaunched the fleet after its tmux server died."""
    budget_warned: list[str] = Field(default_factory=list)
    """The budget caps 80 % spent that were logged as budget-warning (orch.lead.decisions.budget_warnings)."""
    outcome: Outcome | None = None
    replay_of: str | None = None
    """The recording this run replays (a run folder or a copy of one)."""
    replay: list[Assignment] = Field(default_factory=list)
    """Replays: who took which job in the recording, in the order they took them (orch.recording.plan)."""

    def token(self, job_id: str) -> str:
        return f"{job_id}@{self.nonce}"

    def job(self, job_id: str) -> Job:
        return next(j for j in self.jobs if j.id == job_id)

    def book(self, n: int) -> WorkerBook:
        return next(w for w in self.workers if w.n == n)

    def finding(self, finding_id: str) -> AcceptedFinding:
        return next(f for f in self.findings if f.id == finding_id)

    def change(self, change_id: str) -> ChangeBook:
        return next(c for c in self.changes if c.id == change_id)

    def review_jobs(self, change_id: str) -> list[Job]:
        return [j for j in self.jobs if j.change == change_id]

    def jobs_for(self, finding_id: str, round_: int | None = None) -> list[Job]:
        return [j for j in self.jobs if j.finding == finding_id and (round_ is None or j.round == round_)]

    def verdicts_for(self, finding_id: str, round_: int | None = None) -> list[AcceptedVerdict]:
        return [v for v in self.verdicts if v.finding == finding_id and (round_ is None or v.round == round_)]


def save_state(run: RunFolder, state: ControllerState) -> None:
    atomic_write(run.controller_state, state.model_dump_json(indent=2) + "\n")


def load_state(run: RunFolder) -> ControllerState:
    missing = UsageError(f"run {run.name!r} has no controller state", hint="it was not started by `orch run`")
    return read_model(run.controller_state, ControllerState, missing)

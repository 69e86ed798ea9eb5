"""How a change lands, as pure functions: who reviews it, what its gate and reviews add up to, when it goes
back to its writer as a rebase job, and whether a rebased change needs its reviews again.

Rules (a change counts only after the project's own checks passed and another worker tried to break it):
- a change's reviewers are never its writer (nor the writer of a change it rebases); with
  `prefer_other_agent`, one of another agent or model is chosen when the fleet has one (the job waits
  for such a worker rather than taking a same-agent one), as for a finding's verifiers;
- the gate decides first: a protected path edited without the task's leave is REJECTED (scope), a check
  that passed on the base and fails on the change is REJECTED (checks); no reviewer is asked then;
- reviews settle like verdicts (orch.jobs.verification.settle, quorum `reviewers_per_change`): CONFIRMED is
  an approval, anything else is REJECTED (review);
- an approved change goes to the integration queue: LANDED, or (CONFLICT, CHECKS_FAILED) back to its
  writer as a rebase job at the new head while it has rebases left (`max_rebases`), else CONFLICT / FAILED;
- a rebased change whose patch, context lines aside, is the one reviewed keeps its reviews; else it is
  reviewed again;
- the checks (a gate's, an integration's) run off the controller's loop, at most `slots` at once
  (`to_start`): the integration queue one change at a time in the order approved, ahead of the gates; a
  change whose checks had not ended when its controller died is checked again (CHECKING and QUEUED are saved,
  what runs is not);
- a writer that left the tree as it was completes its task (UNCHANGED) unless the task needs a change
  (`change: required`): then the change FAILED (`unchanged`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from orch.jobs.changes import ChangeRow, ChangeStatus
from orch.jobs.state import ChangeBook, ChangeStage, ControllerState, FindingStatus, Job, JobStatus
from orch.jobs.verification import least_busy, settle
from orch.spec.model import FleetSpec, Role

WRITING_ROLES = (Role.WRITER, Role.FIXER, Role.SCRIBE)
"""Roles whose jobs change the tree: each works in its own worktree and its change goes through the gate."""


# --- who reviews -------------------------------------------------------------------------------
def writers_of(state: ControllerState, change: str) -> set[int]:
    """The workers who wrote this change or a change it rebases: none of them reviews it."""
    out: set[int] = set()
    current: str | None = change
    while current is not None:
        book = state.change(current)
        out.add(book.writer)
        current = book.rebase_of
    return out


def review_eligible(state: ControllerState, job: Job, alive: Collection[int]) -> list[int]:
    """Workers allowed to take review `job`: alive, not a writer of the change, not already reviewing it."""
    assert job.change is not None
    writers = writers_of(state, job.change)
    on_it = {
        j.worker
        for j in state.review_jobs(job.change)
        if j.id != job.id and j.worker is not None and j.status is not JobStatus.CANCELLED
    }
    return [n for n in sorted(alive) if n not in writers and n not in on_it]


def choose_reviewer(
    state: ControllerState, spec: FleetSpec, job: Job, alive: Collection[int], free: Collection[int]
) -> int | None:
    """The worker for review `job` now, or None (wait). Never a writer of the change; another kind preferred."""
    assert job.change is not None
    agent_models = spec.agent_models()
    writer = agent_models.get(state.change(job.change).writer)

    def same_kind(n: int) -> tuple[int]:
        return (int(spec.verification.prefer_other_agent and agent_models.get(n) == writer),)

    return least_busy(state, review_eligible(state, job, alive), free, same_kind)


def review_job_id(change: str, slot: int) -> str:
    return f"{change}.v{slot}"


def new_review_jobs(state: ControllerState, change: str, count: int) -> list[Job]:
    taken = {j.id for j in state.jobs}
    jobs: list[Job] = []
    slot = 1
    while len(jobs) < count:
        candidate = review_job_id(change, slot)
        if candidate not in taken:
            jobs.append(Job(id=candidate, role=Role.REVIEWER, change=change, round=2))
        slot += 1
    return jobs


# --- what the gate and the reviews add up to ---------------------------------------------------
def gate(scope: list[str], checks_ok: bool) -> str | None:
    """Why the gate refuses a change before any review (`scope: ...`, `checks: ...`), or None."""
    if scope:
        return "scope: " + "; ".join(scope)
    if not checks_ok:
        return "checks: a check that passed on the base fails with this change"
    return None


def review_status(state: ControllerState, spec: FleetSpec, change: ChangeBook) -> FindingStatus:
    """PENDING while a review job of the change its reviews count for is open; else what they settle to."""
    reviewed = change.reviewed or change.id
    jobs = state.review_jobs(reviewed)
    if not jobs or any(not j.terminal for j in jobs):
        return FindingStatus.PENDING
    votes = (r.report.verdict for r in state.reviews if r.change == reviewed)
    return settle(votes, spec.changes.reviewers_per_change)


class Next(StrEnum):
    """What to do with a change in review (`next_step`)."""

    WAIT = "wait"
    REVIEW = "review"
    """Open its review jobs."""
    REJECT = "reject"
    INTEGRATE = "integrate"


def next_step(state: ControllerState, spec: FleetSpec, change: ChangeBook) -> Next:
    if change.stage is not ChangeStage.REVIEW:
        return Next.WAIT
    if gate(change.scope, change.checks_ok) is not None:
        return Next.REJECT
    if spec.changes.reviewers_per_change == 0:
        return Next.INTEGRATE
    reviewed = change.reviewed or change.id
    if not state.review_jobs(reviewed):
        return Next.REVIEW
    status = review_status(state, spec, change)
    if status is FindingStatus.PENDING:
        return Next.WAIT
    return Next.INTEGRATE if status is FindingStatus.CONFIRMED else Next.REJECT


def reviewed_by(state: ControllerState, rebase_of: str | None, fingerprint_: str) -> str | None:
    """The change whose reviews a rebased change keeps: the one it rebases, when their patches match but for
    context (and that one's reviews were its own or inherited in turn); else None: review it again."""
    if rebase_of is None:
        return None
    earlier = state.change(rebase_of)
    if earlier.fingerprint != fingerprint_:
        return None
    return earlier.reviewed or earlier.id


@dataclass(frozen=True)
class AfterQueue:
    """What an integration result means for a change: its stage, and whether its writer gets a rebase job."""

    stage: ChangeStage
    rebase: bool


def after_queue(result: str, rebases: int, max_rebases: int) -> AfterQueue:
    """`result`: the queue's LANDED, CONFLICT or CHECKS_FAILED. A change that no longer applies or breaks a
    check once integrated goes back to its writer while it has rebases left."""
    if result == "LANDED":
        return AfterQueue(ChangeStage.LANDED, rebase=False)
    if rebases < max_rebases:
        return AfterQueue(ChangeStage.REBASING, rebase=True)
    return AfterQueue(ChangeStage.CONFLICT if result == "CONFLICT" else ChangeStage.FAILED, rebase=False)


def rebase_job_id(task: str, attempt: int) -> str:
    return f"{task}.r{attempt}"


# --- the checks, off the loop ------------------------------------------------------------------
CHECKED = (ChangeStage.CHECKING, ChangeStage.QUEUED)
"""Stages whose checks run (or wait for a slot) off the loop: the run is not over while a change is in one."""


class Work(StrEnum):
    GATE = "gate"
    """The checks on a change's tree (base + patch), before its reviews."""
    INTEGRATION = "integration"
    """The change applied onto the integration head, the checks on the result, the branch moved."""


def checks_pending(state: ControllerState) -> bool:
    return any(c.stage in CHECKED for c in state.changes)


def to_start(state: ControllerState, running: Mapping[str, str], slots: int) -> list[tuple[str, Work]]:
    """What to start now with `running` under way and `slots` at most at once: the next change of the
    integration queue (by `queued_at`; one at a time, as each lands on the last), then the gates waiting, in the
    order their changes were taken."""
    free = slots - len(running)
    out: list[tuple[str, Work]] = []
    queued = sorted((c for c in state.changes if c.stage is ChangeStage.QUEUED), key=lambda c: c.queued_at or 0.0)
    if free > 0 and queued and Work.INTEGRATION not in running.values() and queued[0].id not in running:
        out.append((queued[0].id, Work.INTEGRATION))
        free -= 1
    for change in state.changes:
        if free <= 0:
            break
        if change.stage is ChangeStage.CHECKING and change.id not in running:
            out.append((change.id, Work.GATE))
            free -= 1
    return out


def unchanged(rebase: bool, required: bool) -> tuple[ChangeStage, str]:
    """A writer job whose worktree ended as it was: a first job completed with nothing to land (UNCHANGED), unless
    its task requires a change (FAILED); a rebase that made nothing dropped the change it was sent back with."""
    if rebase:
        return ChangeStage.FAILED, "the rebase left the worktree unchanged"
    if required:
        return ChangeStage.FAILED, "the task requires a change (change: required); the writer left the tree as it was"
    return ChangeStage.UNCHANGED, "the writer left the tree as it was"


# --- the run's outcome -------------------------------------------------------------------------
def unlanded(state: ControllerState, needs_change: Collection[str] = ()) -> dict[str, str]:
    """Writer tasks whose writing ended without a landed change and that keep the run from passing: task -> the
    last change's status and why. A change the gate REJECTED is its verdict, and one the writer left as it
    was (UNCHANGED) its result: either is open only when the task is in `needs_change` (`change: required`, or
    a fixer handed confirmed findings: orch.lead.outcome.decide). CONFLICT and FAILED always are."""
    out: dict[str, str] = {}
    tasks = {j.task for j in state.jobs if j.role in WRITING_ROLES and j.task is not None and j.rebase_of is None}
    for task in sorted(tasks):
        mine = [c for c in state.changes if c.task == task]
        if any(c.stage is ChangeStage.LANDED for c in mine):
            continue
        if not mine:
            continue  # its job failed: the outcome says so already
        last = mine[-1]
        if last.stage in (ChangeStage.UNCHANGED, ChangeStage.REJECTED) and task not in needs_change:
            continue
        out[task] = f"{last.stage.value}" + (f" ({last.reason})" if last.reason else "")
    return out


def every_writer_task_landed(writer_tasks: Sequence[str], rows: Sequence[ChangeRow]) -> bool:
    """True when each writer task has a LANDED change, or completed without changing anything (UNCHANGED); a
    run with no writer task: True."""
    landed = {row.task for row in rows if row.status in (ChangeStatus.LANDED, ChangeStatus.UNCHANGED)}
    return all(task in landed for task in writer_tasks)

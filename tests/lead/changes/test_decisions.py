"""orch.lead.changes.decisions and the changes rules of orch.lead.decisions: who reviews a change, what its gate and
reviews add up to, rebases, and the run's exit code with writers (tables, no I/O)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orch.exitcodes import Exit
from orch.jobs.findings import CommandEvidence, Verdict, VerdictReport
from orch.jobs.state import AcceptedReview, ChangeBook, ChangeStage, ControllerState, Job, JobStatus, WorkerBook
from orch.lead import decisions, outcome
from orch.lead.changes import decisions as change_decisions
from orch.lead.changes.decisions import Next
from orch.run.records import Isolation
from orch.spec.load import parse_spec
from orch.spec.model import FleetSpec, Role

MIXED = "workdir: .\nagents:\n  - {agent: claude, workers: 2}\n  - {agent: codex, workers: 1}\n"
TASKS = "tasks:\n  - {id: fix, role: writer, goal: fix it}\n"


def _spec(tmp_path: Path, extra: str = "") -> FleetSpec:
    return parse_spec(MIXED + TASKS + extra, "f.yaml", tmp_path)


def _state(writer: int = 1, workers: int = 3) -> ControllerState:
    state = ControllerState(run="r", workers=[WorkerBook(n=n, agent="claude") for n in range(1, workers + 1)])
    state.jobs.append(Job(id="fix", role=Role.WRITER, task="fix", worker=writer, status=JobStatus.DONE))
    state.changes.append(ChangeBook(id="fix", task="fix", writer=writer, base="b0", fingerprint="p1"))
    return state


def _review(state: ControllerState, job: Job, verdict: Verdict) -> None:
    assert job.worker is not None and job.change is not None
    job.status = JobStatus.DONE
    report = VerdictReport(
        job=job.id,
        finding=job.change,
        verdict=verdict,
        reason="r",
        evidence=[CommandEvidence(command="t", exit_code=0)],
    )
    state.reviews.append(AcceptedReview(job=job.id, change=job.change, reviewer=job.worker, report=report))


# --- who reviews -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("free", "alive", "chosen"),
    [
        ([1, 2, 3], [1, 2, 3], 3),  # the Codex worker: another kind than the Claude writer
        ([1, 2], [1, 2, 3], None),  # waits for the other kind rather than take worker 2
        ([1], [1, 2, 3], None),  # the writer alone is free: nobody
        ([1, 2], [1, 2], 2),  # worker 3 is out: the same kind will do, never the writer
    ],
)
def test_reviewer_choice(tmp_path: Path, free: list[int], alive: list[int], chosen: int | None) -> None:
    spec, state = _spec(tmp_path), _state(writer=1)
    (job,) = change_decisions.new_review_jobs(state, "fix", 1)
    state.jobs.append(job)
    assert change_decisions.choose_reviewer(state, spec, job, alive, free) == chosen
    assert decisions.pick(state, spec, job, free, alive).worker == chosen


def test_a_rebased_change_is_never_reviewed_by_any_of_its_writers(tmp_path: Path) -> None:
    spec, state = _spec(tmp_path), _state(writer=3)
    state.changes.append(ChangeBook(id="fix.r1", task="fix", writer=2, base="b1", rebase_of="fix", rebases=1))
    (job,) = change_decisions.new_review_jobs(state, "fix.r1", 1)
    state.jobs.append(job)
    assert change_decisions.review_eligible(state, job, [1, 2, 3]) == [1]
    assert decisions.pick(state, spec, job, [2, 3], [2, 3]).fail is not None  # nobody left may review it


# --- the gate, the reviews, the queue ----------------------------------------------------------
@pytest.mark.parametrize(
    ("scope", "checks_ok", "verdicts", "step"),
    [
        (["tests/test_calc.py"], True, None, Next.REJECT),  # scope first, no review asked
        ([], False, None, Next.REJECT),  # a regressed check
        ([], True, None, Next.REVIEW),  # the gate passed: open its reviews
        ([], True, [], Next.WAIT),  # a review is running
        ([], True, [Verdict.CONFIRMED], Next.INTEGRATE),
        ([], True, [Verdict.REFUTED], Next.REJECT),
        ([], True, [Verdict.UNVERIFIABLE], Next.REJECT),
    ],
)
def test_landing_rule(
    tmp_path: Path, scope: list[str], checks_ok: bool, verdicts: list[Verdict] | None, step: Next
) -> None:
    spec, state = _spec(tmp_path), _state()
    book = state.change("fix")
    book.scope, book.checks_ok = scope, checks_ok
    if verdicts is not None:
        (job,) = change_decisions.new_review_jobs(state, "fix", 1)
        job.worker, job.status = 3, JobStatus.RUNNING
        state.jobs.append(job)
        for v in verdicts:
            _review(state, job, v)
    assert change_decisions.next_step(state, spec, book) is step


def test_no_reviewers_asked_integrates_after_the_gate(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "changes: {reviewers_per_change: 0}\n")
    assert change_decisions.next_step(spec=spec, state=_state(), change=_state().change("fix")) is Next.INTEGRATE


def test_a_failed_review_job_rejects_the_change(tmp_path: Path) -> None:
    spec, state = _spec(tmp_path), _state()
    (job,) = change_decisions.new_review_jobs(state, "fix", 1)
    job.worker, job.status = 3, JobStatus.FAILED  # e.g. its approval cited nothing it ran
    state.jobs.append(job)
    assert change_decisions.next_step(state, spec, state.change("fix")) is Next.REJECT


@pytest.mark.parametrize(
    ("result", "rebases", "stage", "rebase"),
    [
        ("LANDED", 0, ChangeStage.LANDED, False),
        ("CONFLICT", 0, ChangeStage.REBASING, True),
        ("CHECKS_FAILED", 1, ChangeStage.REBASING, True),
        ("CONFLICT", 2, ChangeStage.CONFLICT, False),  # max_rebases 2 used up
        ("CHECKS_FAILED", 2, ChangeStage.FAILED, False),
    ],
)
def test_rebase_rule(result: str, rebases: int, stage: ChangeStage, rebase: bool) -> None:
    assert change_decisions.after_queue(result, rebases, 2) == change_decisions.AfterQueue(stage, rebase)


@pytest.mark.parametrize(("fingerprint", "kept"), [("p1", "fix"), ("p2", None)])
def test_a_rebase_keeps_its_reviews_only_when_the_patch_is_the_same(fingerprint: str, kept: str | None) -> None:
    state = _state()
    assert change_decisions.reviewed_by(state, "fix", fingerprint) == kept
    assert change_decisions.reviewed_by(state, None, fingerprint) is None


# --- the run's exit code -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("stages", "code"),
    [
        ([ChangeStage.LANDED], Exit.PASSED),
        ([ChangeStage.REBASING, ChangeStage.LANDED], Exit.PASSED),  # landed after a rebase
        ([ChangeStage.REJECTED], Exit.PASSED),  # the gate's verdict: a result, as a REFUTED finding is
        ([ChangeStage.REBASING, ChangeStage.CONFLICT], Exit.INCOMPLETE),
        ([], Exit.PASSED),  # no change taken: its job failed, which the next case shows
        ([ChangeStage.UNCHANGED], Exit.PASSED),  # it completed and found nothing to change
        ([ChangeStage.REBASING, ChangeStage.FAILED], Exit.INCOMPLETE),  # a rebase that made nothing
    ],
)
def test_exit_code_with_writers(tmp_path: Path, stages: list[ChangeStage], code: int) -> None:
    spec, state = _spec(tmp_path), _state()
    state.changes = [ChangeBook(id=f"fix{i}", task="fix", writer=1, base="b", stage=s) for i, s in enumerate(stages)]
    assert outcome.decide(state, spec).exit_code == code


@pytest.mark.parametrize("stage", [ChangeStage.REJECTED, ChangeStage.UNCHANGED])
def test_a_change_the_task_needed_keeps_the_run_from_passing_unless_it_landed(stage: ChangeStage) -> None:
    """REJECTED and UNCHANGED are results for a writer that may change nothing; for a task that needed a change
    (`change: required`, a fixer handed confirmed findings) they leave its goal undone."""
    state = _state()
    state.change("fix").stage, state.change("fix").reason = stage, "scope"
    assert change_decisions.unlanded(state) == {}
    assert change_decisions.unlanded(state, {"fix"}) == {"fix": f"{stage.value} (scope)"}


def test_an_unchanged_tree_is_open_only_for_a_task_that_needed_a_change() -> None:
    """A fixer handed confirmed findings needs a change (orch.lead.outcome.decide passes its task); any
    other writer that left the tree as it was completed with nothing to land."""
    state = _state()
    state.change("fix").stage, state.change("fix").reason = ChangeStage.UNCHANGED, "the writer left the tree as it was"
    assert change_decisions.unlanded(state) == {}
    assert change_decisions.unlanded(state, {"fix"}) == {"fix": "UNCHANGED (the writer left the tree as it was)"}
    state.change("fix").stage = ChangeStage.LANDED
    assert change_decisions.unlanded(state, {"fix"}) == {}


def test_a_failed_writer_job_fails_the_run_and_a_failed_review_does_not_by_itself(tmp_path: Path) -> None:
    spec, state = _spec(tmp_path), _state()
    state.changes[0].stage = ChangeStage.LANDED
    state.jobs.append(Job(id="fix.v1", role=Role.REVIEWER, change="fix", status=JobStatus.FAILED))
    assert outcome.decide(state, spec).exit_code == Exit.PASSED
    state.jobs[0].status = JobStatus.FAILED
    assert outcome.decide(state, spec).exit_code == Exit.FAILED


def test_a_spec_with_writers_stays_strict_in_a_container(tmp_path: Path) -> None:
    spec = parse_spec("workdir: .\nagent: claude\n" + TASKS, "f.yaml", tmp_path)
    assert decisions.isolation(spec) is Isolation.STRICT
    strict = parse_spec("workdir: .\nagent: claude\nverification: {isolation: strict}\n" + TASKS, "f.yaml", tmp_path)
    assert decisions.isolation(strict) is Isolation.STRICT


# --- the checks, off the loop ------------------------------------------------------------------
def _books(*stages: tuple[str, ChangeStage, float | None]) -> ControllerState:
    state = _state()
    state.changes = [
        ChangeBook(id=cid, task="fix", writer=1, base="b", stage=stage, queued_at=queued)
        for cid, stage, queued in stages
    ]
    return state


GATE, INTEGRATE = change_decisions.Work.GATE, change_decisions.Work.INTEGRATION
QUEUE_CASES: dict[
    str, tuple[list[tuple[str, ChangeStage, float | None]], dict[str, str], int, list[tuple[str, str]]]
] = {
    # (changes, running, slots, what starts now)
    "gates-in-order-up-to-the-slots": (
        [("a", ChangeStage.CHECKING, None), ("b", ChangeStage.CHECKING, None), ("c", ChangeStage.CHECKING, None)],
        {},
        2,
        [("a", GATE), ("b", GATE)],
    ),
    "a-running-gate-is-not-started-again": ([("a", ChangeStage.CHECKING, None)], {"a": GATE}, 2, []),
    "no-free-slot": (
        [("a", ChangeStage.CHECKING, None), ("b", ChangeStage.CHECKING, None)],
        {"a": GATE, "x": GATE},
        2,
        [],
    ),
    "the-queue-first-by-approval-then-gates": (
        [("a", ChangeStage.CHECKING, None), ("b", ChangeStage.QUEUED, 2.0), ("c", ChangeStage.QUEUED, 1.0)],
        {},
        2,
        [("c", INTEGRATE), ("a", GATE)],
    ),
    "one-integration-at-a-time": (
        [("b", ChangeStage.QUEUED, 2.0), ("c", ChangeStage.QUEUED, 1.0), ("d", ChangeStage.CHECKING, None)],
        {"c": INTEGRATE},
        3,
        [("d", GATE)],
    ),
    "other-stages-wait-for-nothing": (
        [("a", ChangeStage.REVIEW, None), ("b", ChangeStage.LANDED, None), ("c", ChangeStage.UNCHANGED, None)],
        {},
        2,
        [],
    ),
}


@pytest.mark.parametrize("case", QUEUE_CASES)
def test_which_checks_start(case: str) -> None:
    stages, running, slots, starts = QUEUE_CASES[case]
    assert change_decisions.to_start(_books(*stages), running, slots) == starts


@pytest.mark.parametrize(
    ("stage", "pending"),
    [
        (ChangeStage.CHECKING, True),
        (ChangeStage.QUEUED, True),
        (ChangeStage.REVIEW, False),
        (ChangeStage.LANDED, False),
    ],
)
def test_the_run_is_not_over_while_a_change_is_checked(stage: ChangeStage, pending: bool) -> None:
    """Every job ended (the writer's included): a change still being checked or queued keeps the run going, unless
    it was aborted (its checks are stopped, the change FAILED)."""
    state = _books(("fix", stage, 1.0))
    assert change_decisions.checks_pending(state) is pending
    assert decisions.finished(state) is not pending
    state.aborted = "budget"
    assert decisions.finished(state)


@pytest.mark.parametrize(
    ("rebase", "required", "stage", "says"),
    [
        (False, False, ChangeStage.UNCHANGED, "left the tree as it was"),
        (False, True, ChangeStage.FAILED, "requires a change (change: required)"),
        (True, False, ChangeStage.FAILED, "rebase left the worktree unchanged"),
        (True, True, ChangeStage.FAILED, "rebase left the worktree unchanged"),
    ],
)
def test_a_writer_that_changed_nothing(rebase: bool, required: bool, stage: ChangeStage, says: str) -> None:
    got, reason = change_decisions.unchanged(rebase, required)
    assert got is stage and says in reason


@pytest.mark.parametrize(
    ("role", "change", "confirmed", "needs"),
    [
        ("writer", None, True, False),
        ("writer", "required", False, True),
        ("fixer", None, True, True),  # handed confirmed findings: it was asked for a change
        ("fixer", None, False, False),
        ("fixer", "optional", True, False),
        ("scribe", "required", False, True),
    ],
)
def test_which_writer_tasks_need_a_change(
    tmp_path: Path, role: str, change: str | None, confirmed: bool, needs: bool
) -> None:
    line = f"  - {{id: fix, role: {role}, goal: fix it" + (f", change: {change}" if change else "") + "}\n"
    spec = parse_spec(MIXED + "tasks:\n" + line, "f.yaml", tmp_path)
    assert spec.tasks[0].needs_change(confirmed) is needs


def test_a_required_change_that_failed_is_open_in_the_outcome(tmp_path: Path) -> None:
    spec, state = _spec(tmp_path), _state()
    state.change("fix").stage, state.change("fix").reason = change_decisions.unchanged(False, True)
    ended = outcome.decide(state, spec)
    assert ended.exit_code == Exit.INCOMPLETE
    assert "change fix FAILED (the task requires a change (change: required)" in ended.reason

"""The controller's pure decisions (orch.lead.decisions) as tables: no tmux, no agent, no files.

Each table is a dict of named cases, so a failure names the rule that broke.
"""

from __future__ import annotations

from typing import Any

import pytest

from orch.errors import UsageError
from orch.jobs.findings import CommandEvidence, Finding, Severity, Verdict, VerdictReport
from orch.jobs.state import (
    AcceptedFinding,
    AcceptedVerdict,
    Assignment,
    ControllerState,
    Job,
    JobStatus,
    Stance,
    WorkerBook,
)
from orch.lead import decisions
from orch.lead.decisions import BACKSTOP, Crash, Nudge, Pick, Retry, Watch
from orch.run.records import HookEvent, Isolation, WorkerState
from orch.spec.model import AgentGroup, Budget, FleetSpec, Limits, Role, Rounds, TaskSpec, VerificationSpec

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

FATAL = {"authentication_failed"}
NOW = 10_000.0


def _spec(workers: int = 3, **verification: Any) -> FleetSpec:
    return FleetSpec(tasks=[TaskSpec(goal="g")], workers=workers, verification=VerificationSpec(**verification))


def _state(workers: int = 3) -> ControllerState:
    return ControllerState(
        run="r", started=NOW, workers=[WorkerBook(n=n, agent="claude") for n in range(1, workers + 1)]
    )


def _add_finding(
    state: ControllerState, fid: str = "t1-F1", finder: int = 1, severity: Severity = Severity.LOW
) -> None:
    finding = Finding(id=fid.split("-")[1], claim="c", severity=severity)
    state.findings.append(AcceptedFinding(id=fid, job="t1", task="t1", finder=finder, finding=finding))


def _vote(state: ControllerState, fid: str, slot: int, vote: str, round_: int = 2) -> Job:
    """One verification job of `fid`: a verdict (done), or "failed", "pending", "running"."""
    stance = Stance.CONFIRM if round_ == 3 else Stance.VERIFY
    job = Job(id=f"{fid}.{stance.value[0]}{slot}", role=Role.VERIFIER, finding=fid, round=round_, stance=stance)
    job.worker = 1 + slot
    state.jobs.append(job)
    if vote in ("failed", "pending", "running"):
        job.status = JobStatus(vote)
        return job
    job.status = JobStatus.DONE
    report = VerdictReport(
        job=job.id, finding=fid, verdict=Verdict(vote), reason="r", evidence=[CommandEvidence(command="t", exit_code=0)]
    )
    state.verdicts.append(
        AcceptedVerdict(job=job.id, finding=fid, verifier=job.worker, round=round_, stance=stance, report=report)
    )
    return job


# --- who takes a job ---------------------------------------------------------------------------
def _kinds_spec(other_model: bool, prefer: bool = True) -> FleetSpec:
    groups = [AgentGroup(workers=2), AgentGroup(model="other" if other_model else None, workers=1)]
    verification = VerificationSpec(prefer_other_agent=prefer)
    return FleetSpec(tasks=[TaskSpec(goal="g")], agents=groups, verification=verification)


PICKS: dict[str, tuple[FleetSpec, list[int], list[int], Pick]] = {
    # verification job of a finding by worker 1: (spec, free, alive, pick)
    "never-the-finder": (_kinds_spec(False), [1], [1, 2, 3], Pick()),
    "another-worker": (_kinds_spec(False), [1, 2], [1, 2, 3], Pick(2)),
    "least-loaded-then-lowest": (_kinds_spec(False), [3, 2], [1, 2, 3], Pick(2)),
    "only-the-finder-left": (_kinds_spec(False), [1], [1], Pick(fail="no worker left that may verify this finding")),
    "other-model-preferred": (_kinds_spec(True), [2, 3], [1, 2, 3], Pick(3)),
    "waits-for-the-other-model": (_kinds_spec(True), [2], [1, 2, 3], Pick()),
    "same-model-when-other-is-out": (_kinds_spec(True), [2], [1, 2], Pick(2)),
    "no-preference-asked": (_kinds_spec(True, prefer=False), [2, 3], [1, 2, 3], Pick(2)),
}


@pytest.mark.parametrize(("spec", "free", "alive", "expected"), PICKS.values(), ids=PICKS.keys())
def test_pick_a_verifier(spec: FleetSpec, free: list[int], alive: list[int], expected: Pick) -> None:
    state = _state()
    _add_finding(state, finder=1)
    job = Job(id="t1-F1.v1", role=Role.VERIFIER, finding="t1-F1", round=2, stance=Stance.VERIFY)
    state.jobs.append(job)
    got = decisions.pick(state, spec, job, free, alive)
    assert got.worker == expected.worker
    assert (got.fail is None) == (expected.fail is None)
    if expected.fail is not None:
        assert got.fail is not None and got.fail.startswith(expected.fail)


def test_confirm_round_prefers_a_worker_that_did_not_judge_round_two() -> None:
    spec = _spec(workers=4, rounds=Rounds.FIND_REFUTE_CONFIRM)
    state = _state(workers=4)
    _add_finding(state, finder=1)
    _vote(state, "t1-F1", 1, "UNVERIFIABLE")  # worker 2 judged it in round 2
    confirm = _vote(state, "t1-F1", 1, "pending", round_=3)
    confirm.worker = None
    assert decisions.pick(state, spec, confirm, [2, 3], [1, 2, 3, 4]) == Pick(3)
    assert decisions.pick(state, spec, confirm, [2], [1, 2]) == Pick(2)  # nobody else left: worker 2 will do


TASK_PICKS: dict[str, tuple[Role, int | None, str, list[int], list[int], Pick]] = {
    # (role, pin, state of another finder job, free, alive, pick)
    "queue-takes-lowest-free": (Role.FINDER, None, "done", [3, 2], [1, 2, 3], Pick(2)),
    "pinned-worker-free": (Role.FINDER, 3, "done", [2, 3], [1, 2, 3], Pick(3)),
    "pinned-worker-busy": (Role.FINDER, 3, "done", [2], [1, 2, 3], Pick()),
    "pinned-worker-out": (Role.FINDER, 3, "done", [2], [1, 2], Pick(fail="its worker 3 is out of the run")),
    "fixer-waits-for-verification": (Role.FIXER, None, "running", [2], [1, 2, 3], Pick()),
    "fixer-after-verification": (Role.FIXER, None, "done", [2], [1, 2, 3], Pick(2)),
    "scribe-waits-for-verification": (Role.SCRIBE, None, "pending", [2], [1, 2, 3], Pick()),
}


@pytest.mark.parametrize(
    ("role", "pin", "other", "free", "alive", "expected"), TASK_PICKS.values(), ids=TASK_PICKS.keys()
)
def test_pick_a_task_worker(
    role: Role, pin: int | None, other: str, free: list[int], alive: list[int], expected: Pick
) -> None:
    state = _state()
    state.jobs.append(Job(id="find", role=Role.FINDER, task="find", status=JobStatus(other)))
    job = Job(id="t2", role=role, task="t2", pin=pin)
    state.jobs.append(job)
    assert decisions.pick(state, _spec(), job, free, alive) == expected


def _plan(*pairs: tuple[str, int]) -> list[Assignment]:
    return [Assignment(job=job, worker=n) for job, n in pairs]


PLAN = _plan(("t1", 2), ("t2", 1), ("v1", 1), ("v2", 2))
REPLAY_PICKS: dict[str, tuple[str, list[str], list[int], list[int], Pick]] = {
    # the recording: W2 took t1, W1 t2 then v1, W2 v2. (job to hand out, jobs already handed out, free, alive, pick)
    "its-recorded-worker": ("t1", [], [1, 2], [1, 2], Pick(2)),
    "not-the-lowest-free": ("t2", [], [1, 2], [1, 2], Pick(1)),
    "waits-for-its-recorded-worker": ("t1", [], [1], [1, 2], Pick()),
    "in-the-recorded-order": ("v1", [], [1, 2], [1, 2], Pick()),
    "after-the-earlier-one": ("v1", ["t1", "t2"], [1, 2], [1, 2], Pick(1)),
    "the-other-worker-s-order-is-its-own": ("v2", ["t1"], [2], [1, 2], Pick(2)),
    "recorded-worker-out": ("v2", ["t1"], [1], [1], Pick(fail="its recorded worker 2 is out of the run")),
    "never-in-the-recording": ("x9", [], [1, 2], [1, 2], Pick(fail="the recording never handed out this job")),
}


@pytest.mark.parametrize(
    ("job_id", "handed", "free", "alive", "expected"), REPLAY_PICKS.values(), ids=REPLAY_PICKS.keys()
)
def test_pick_in_a_replay(job_id: str, handed: list[str], free: list[int], alive: list[int], expected: Pick) -> None:
    state = _state()
    workers = {a.job: a.worker for a in PLAN}
    for other in handed:
        state.jobs.append(Job(id=other, role=Role.FINDER, worker=workers[other], status=JobStatus.RUNNING))
    job = Job(id=job_id, role=Role.FINDER, task=job_id)
    state.jobs.append(job)
    got = decisions.pick(state, _spec(), job, free, alive, PLAN)
    assert got.worker == expected.worker
    assert (got.fail is None) == (expected.fail is None)
    if expected.fail is not None:
        assert got.fail is not None and got.fail.startswith(expected.fail)


AWAITS: dict[str, tuple[dict[str, Any], bool]] = {
    "free": ({}, True),
    "has-a-job": ({"job": "t1"}, False),
    "out-of-the-run": ({"dead": "crashed"}, False),
    "capped": ({"capped": True}, False),
    "restart-due": ({"restart_at": NOW}, False),
}


@pytest.mark.parametrize(("book", "expected"), AWAITS.values(), ids=AWAITS.keys())
def test_awaits_job(book: dict[str, Any], expected: bool) -> None:
    assert decisions.awaits_job(WorkerBook(n=1, agent="claude", **book)) is expected


# --- settling: sends and turns -----------------------------------------------------------------
def _ev(name: str, ts: float, prompt: str | None = None) -> HookEvent:
    return HookEvent(ts=ts, hook_event_name=name, prompt=prompt)


POINTER = "/runs/r/agent-1.task.md"
DELIVERED: dict[str, tuple[list[HookEvent], bool]] = {
    "pointer-prompt-after-send": ([_ev("UserPromptSubmit", 5, f"Read {POINTER} then begin")], True),
    "prompt-before-send": ([_ev("UserPromptSubmit", 3, f"Read {POINTER}")], False),
    "other-prompt": ([_ev("UserPromptSubmit", 5, "continue")], False),
    "not-a-prompt": ([_ev("Notification", 5, POINTER)], False),
    "no-events": ([], False),
}


@pytest.mark.parametrize(("events", "expected"), DELIVERED.values(), ids=DELIVERED.keys())
def test_brief_delivered(events: list[HookEvent], expected: bool) -> None:
    assert decisions.brief_delivered(events, 4.0, POINTER) is expected


RELAUNCHED: dict[str, tuple[list[str], bool]] = {
    "new-session-no-prompt": (["SessionStart"], True),
    "new-session-prompted": (["SessionStart", "UserPromptSubmit"], False),
    "prompt-then-new-session": (["UserPromptSubmit", "SessionStart"], True),
    "two-sessions-last-unprompted": (["SessionStart", "UserPromptSubmit", "SessionStart"], True),
    "no-session": (["UserPromptSubmit", "Stop"], False),
    "nothing": ([], False),
}


@pytest.mark.parametrize(("names", "expected"), RELAUNCHED.values(), ids=RELAUNCHED.keys())
def test_relaunched(names: list[str], expected: bool) -> None:
    old = [_ev("SessionStart", 1.0)]  # before `since`: the previous life does not count
    assert decisions.relaunched([*old, *(_ev(n, 10.0 + i) for i, n in enumerate(names))], 5.0) is expected


def _life(name: str, ts: float, session: str | None) -> HookEvent:
    return HookEvent(ts=ts, hook_event_name=name, session_id=session)


LIVES: dict[str, tuple[list[HookEvent], str | None, list[str]]] = {
    "late-session-end-before-the-start": (
        [_life("Stop", 1, "a"), _life("SessionEnd", 6, "a"), _life("SessionStart", 7, "b")],
        None,
        ["SessionStart@7"],
    ),
    "late-session-end-while-booting": ([_life("SessionEnd", 6, None)], None, []),
    "a-crash-on-boot-still-counts": ([_life("ProcessExit", 6, None)], None, ["ProcessExit@6"]),
    "the-ended-session-after-the-start": (
        [_life("SessionStart", 6, "b"), _life("SessionEnd", 7, "a"), _life("Stop", 8, "b")],
        "a",
        ["SessionStart@6", "Stop@8"],
    ),
    "its-own-end-after-its-start": (
        [_life("SessionStart", 6, "b"), _life("SessionEnd", 9, "b")],
        "a",
        ["SessionStart@6", "SessionEnd@9"],
    ),
    "a-resumed-session-keeps-its-id": (
        [_life("SessionStart", 6, "a"), _life("Stop", 7, "a")],
        None,
        ["SessionStart@6", "Stop@7"],
    ),
}


@pytest.mark.parametrize(("events", "ended", "kept"), LIVES.values(), ids=LIVES.keys())
def test_life_events_leave_out_the_previous_lifes_late_hooks(
    events: list[HookEvent], ended: str | None, kept: list[str]
) -> None:
    """Restarted at 5: what the previous life's hooks wrote after that (respawning a live agent ends its session
    as the new one boots) does not make the new life look ended."""
    assert [f"{e.hook_event_name}@{e.ts:g}" for e in decisions.life_events(events, 5.0, ended)] == kept
    assert decisions.life_events(events, None, ended) == events  # never restarted: every event


W = WorkerState
JOB_TIMEOUT = 100.0
WATCHES: dict[str, tuple[str | None, WorkerState, str | None, bool, bool, float, Watch]] = {
    # (job status or None, worker state, detail, has last event, done flag, seconds since sent, step)
    "sending-is-settled-first": ("sending", W.IDLE, None, True, True, 500, Watch.SETTLE_SEND),
    "done-flag-and-idle": ("running", W.IDLE, None, True, True, 5, Watch.COLLECT),
    "done-flag-after-crash": ("running", W.CRASHED, None, True, True, 5, Watch.COLLECT),
    "done-flag-mid-turn-waits": ("running", W.BUSY, None, True, True, 5, Watch.WORKING),
    "timed-out": ("running", W.BUSY, None, True, False, 101, Watch.TIMED_OUT),
    "timed-out-before-crash": ("running", W.CRASHED, None, True, False, 101, Watch.TIMED_OUT),
    "crashed": ("running", W.CRASHED, None, True, False, 5, Watch.ENDED),
    "exited-without-job": (None, W.EXITED, None, True, False, 5, Watch.ENDED),
    "idle-without-job": (None, W.IDLE, None, True, False, 5, Watch.NOTHING),
    "job-already-failed": ("failed", W.IDLE, None, True, False, 5, Watch.NOTHING),
    "rate-limited": ("running", W.RATE_LIMITED, "rate_limit", True, False, 5, Watch.RATE_LIMITED),
    "api-error": ("running", W.ERROR, "server_error", True, False, 5, Watch.API_ERROR),
    "fatal-error": ("running", W.ERROR, "authentication_failed", True, False, 5, Watch.FATAL_ERROR),
    "idle-no-done-flag": ("running", W.IDLE, None, True, False, 5, Watch.IDLE),
    "busy": ("running", W.BUSY, None, True, False, 5, Watch.WORKING),
    "permission-prompt": ("running", W.WAITING_FOR_PERMISSION, None, True, False, 5, Watch.WORKING),
}


@pytest.mark.parametrize(
    ("status", "state", "detail", "last", "done", "age", "step"), WATCHES.values(), ids=WATCHES.keys()
)
def test_watch_step(
    status: str | None, state: WorkerState, detail: str | None, last: bool, done: bool, age: float, step: Watch
) -> None:
    job = Job(id="t1", role=Role.FINDER, status=JobStatus(status), sent_at=NOW - age) if status else None
    event = _ev("Stop", NOW - 1) if last else None
    assert decisions.watch_step(job, state, detail, event, done, NOW, JOB_TIMEOUT, FATAL) is step


SENDS: dict[str, tuple[int, bool]] = {"first-try": (1, False), "second-try": (2, False), "third-try": (3, True)}


@pytest.mark.parametrize(("attempts", "given_up"), SENDS.values(), ids=SENDS.keys())
def test_send_given_up(attempts: int, given_up: bool) -> None:
    assert decisions.send_given_up(Job(id="t1", role=Role.FINDER, send_attempts=attempts)) is given_up


# --- limits ------------------------------------------------------------------------------------
NUDGES: dict[str, tuple[int, float, float | None, int, Nudge]] = {
    # (nudges so far, seconds since the last hook event, since the last prompt, max_nudges, decision)
    "not-idle-long-enough": (0, 119, 500, 3, Nudge.WAIT),
    "idle-long-enough": (0, 120, 500, 3, Nudge.NUDGE),
    "recent-prompt-counts": (0, 500, 60, 3, Nudge.WAIT),
    "below-the-limit": (2, 500, 500, 3, Nudge.NUDGE),
    "limit-reached": (3, 500, 500, 3, Nudge.GIVE_UP),
    "no-nudges-allowed": (0, 500, 500, 0, Nudge.GIVE_UP),
    "limit-waits-for-idle": (3, 10, 500, 3, Nudge.WAIT),
}


@pytest.mark.parametrize(("nudges", "event_age", "prompt_age", "limit", "expected"), NUDGES.values(), ids=NUDGES.keys())
def test_nudge(nudges: int, event_age: float, prompt_age: float | None, limit: int, expected: Nudge) -> None:
    prompted = NOW - prompt_age if prompt_age is not None else None
    job = Job(id="t1", role=Role.FINDER, nudges=nudges, last_prompt_at=prompted)
    limits = Limits(nudge_after=120, max_nudges=limit)
    assert decisions.nudge(job, _ev("Stop", NOW - event_age), NOW, limits) is expected


CORRECTIONS: dict[str, tuple[int, int, bool]] = {
    "first-correction": (0, 2, True),
    "last-correction": (1, 2, True),
    "limit-reached": (2, 2, False),
    "no-corrections-allowed": (0, 0, False),
}


@pytest.mark.parametrize(("corrections", "limit", "allowed"), CORRECTIONS.values(), ids=CORRECTIONS.keys())
def test_may_correct(corrections: int, limit: int, allowed: bool) -> None:
    job = Job(id="t1", role=Role.FINDER, corrections=corrections)
    assert decisions.may_correct(job, Limits(max_corrections=limit)) is allowed


RETRIES: dict[str, tuple[float, int, float | None, Retry]] = {
    # (last event's time vs the handled one at 50, waits so far, continue_at, decision); max 3 waits
    "new-failed-turn": (60, 0, None, Retry.WAIT),
    "last-allowed-wait": (60, 2, None, Retry.WAIT),
    "too-many-waits": (60, 3, None, Retry.GIVE_UP),
    "still-waiting": (50, 1, NOW + 5, Retry.HOLD),
    "wait-over": (50, 1, NOW, Retry.CONTINUE),
    "nothing-to-do": (50, 1, None, Retry.HOLD),
}


@pytest.mark.parametrize(("last_ts", "waits", "continue_at", "expected"), RETRIES.values(), ids=RETRIES.keys())
def test_retry(last_ts: float, waits: int, continue_at: float | None, expected: Retry) -> None:
    job = Job(id="t1", role=Role.FINDER, handled_event_ts=50, rate_waits=waits, continue_at=continue_at)
    assert decisions.retry(job, _ev("StopFailure", last_ts), NOW, Limits(max_rate_limit_waits=3)) is expected


CONTINUE_WAITS: dict[str, tuple[float | None, float, tuple[float, str]]] = {
    # (the gateway's rate_limited_until, the failed turn's time, the wait and its source); spec's wait 60
    "no-gateway-word": (None, NOW - 1, (60, "spec")),
    "gateway-retry-after": (NOW + 7, NOW - 1, (7, "gateway")),
    "shorter-than-the-spec": (NOW + 0.25, NOW - 1, (0.2, "gateway")),
    "longer-than-the-spec": (NOW + 300, NOW - 1, (300, "gateway")),
    "lifted-already": (NOW - 0.5, NOW - 1, (0, "gateway")),
    "lifted-as-it-failed": (NOW - 1, NOW - 1, (0, "gateway")),
    "ended-before-the-failure": (NOW - 2, NOW - 1, (60, "spec")),
    "an-old-limit": (NOW - 3600, NOW - 1, (60, "spec")),
}


@pytest.mark.parametrize(("until", "failed_at", "wait"), CONTINUE_WAITS.values(), ids=CONTINUE_WAITS.keys())
def test_continue_wait(until: float | None, failed_at: float, wait: tuple[float, str]) -> None:
    assert decisions.continue_wait(60, until, failed_at, NOW) == wait


BACKOFFS: dict[str, tuple[int, float, float, float]] = {
    "first-restart": (0, 2, 60, 2),
    "doubles": (1, 2, 60, 4),
    "doubles-again": (3, 2, 60, 16),
    "capped": (10, 2, 60, 60),
    "no-backoff": (2, 0, 60, 0),
}


@pytest.mark.parametrize(("restarts", "backoff", "cap", "delay"), BACKOFFS.values(), ids=BACKOFFS.keys())
def test_restart_delay(restarts: int, backoff: float, cap: float, delay: float) -> None:
    assert decisions.restart_delay(restarts, Limits(restart_backoff=backoff, restart_backoff_max=cap)) == delay


CRASHES: dict[str, tuple[int, float | None, int, Crash]] = {
    # (restarts so far, restart_at, max_restarts, decision)
    "first-crash": (0, None, 2, Crash.SCHEDULE),
    "limit-reached": (2, None, 2, Crash.OUT),
    "no-restarts-allowed": (0, None, 0, Crash.OUT),
    "backoff-running": (1, NOW + 1, 2, Crash.WAIT),
    "backoff-over": (1, NOW, 2, Crash.RESTART),
}


@pytest.mark.parametrize(("restarts", "restart_at", "limit", "expected"), CRASHES.values(), ids=CRASHES.keys())
def test_crash(restarts: int, restart_at: float | None, limit: int, expected: Crash) -> None:
    book = WorkerBook(n=1, agent="claude", restarts=restarts, restart_at=restart_at)
    assert decisions.crash(book, NOW, Limits(max_restarts=limit)) is expected


RELAUNCHES: dict[str, tuple[int, int, bool]] = {
    "first": (0, 2, False),
    "last": (1, 2, False),
    "limit-reached": (2, 2, True),
    "none-allowed": (0, 0, True),
}


@pytest.mark.parametrize(("used", "limit", "refused"), RELAUNCHES.values(), ids=RELAUNCHES.keys())
def test_relaunch_refused(used: int, limit: int, refused: bool) -> None:
    state = _state()
    state.relaunches = used
    assert (decisions.relaunch_refused(state, Limits(max_relaunches=limit)) is not None) is refused


# --- budget, the loop's end and its sleep --------------------------------------------------------
S = decisions.Spend
BUDGETS: dict[str, tuple[dict[str, Any], dict[int, decisions.Spend], str | None, set[int], list[int], str | None]] = {
    # (budget, each worker's spend, the gateway's fleet refusal, already capped, newly capped, abort starts)
    "under-budget": ({"max_cost_usd": 1.0}, {1: S(0.2), 2: S(0.3)}, None, set(), [], None),
    "over-budget": ({"max_cost_usd": 1.0}, {1: S(0.6), 2: S(0.5)}, None, set(), [], "the fleet's cost $1.1000"),
    "at-budget-is-not-over": ({"max_cost_usd": 1.0}, {1: S(0.5), 2: S(0.5)}, None, set(), [], None),
    "worker-over-cap": ({"max_cost_per_worker_usd": 0.5}, {1: S(0.2), 2: S(0.7)}, None, set(), [2], None),
    "worker-at-cap": ({"max_cost_per_worker_usd": 0.5}, {1: S(0.5)}, None, set(), [], None),
    "capped-once": ({"max_cost_per_worker_usd": 0.5}, {1: S(0.9), 2: S(0.7)}, None, {1}, [2], None),
    "cap-and-abort": (
        {"max_cost_usd": 1.0, "max_cost_per_worker_usd": 0.5},
        {1: S(0.9), 2: S(0.2)},
        None,
        set(),
        [1],
        "the fleet's cost",
    ),
    "tokens-under": ({"max_tokens": 100}, {1: S(tokens=50), 2: S(tokens=50)}, None, set(), [], None),
    "tokens-over": ({"max_tokens": 100}, {1: S(tokens=60), 2: S(tokens=41)}, None, set(), [], "the fleet's 101 tokens"),
    "worker-tokens-over": ({"max_tokens_per_worker": 10}, {1: S(tokens=11), 2: S(tokens=10)}, None, set(), [1], None),
    "gateway-refused-a-worker": ({"max_tokens": 100}, {1: S(refused="w1 at 100 tokens")}, None, set(), [1], None),
    "gateway-refusal-is-once": ({"max_tokens": 100}, {1: S(refused="w1 at 100 tokens")}, None, {1}, [], None),
    "gateway-refused-the-fleet": (
        {"max_cost_usd": 5.0},
        {1: S(0.1)},
        "fleet at $5",
        set(),
        [],
        "the model gateway refused the fleet: fleet at $5",
    ),
}


@pytest.mark.parametrize(
    ("caps", "spend", "fleet_refused", "capped", "new", "abort"), BUDGETS.values(), ids=BUDGETS.keys()
)
def test_budget_check(
    caps: dict[str, Any],
    spend: dict[int, decisions.Spend],
    fleet_refused: str | None,
    capped: set[int],
    new: list[int],
    abort: str | None,
) -> None:
    budget = Budget(**caps)
    assert decisions.has_budget(budget)
    check = decisions.budget_check(budget, spend, fleet_refused, capped)
    assert [o.worker for o in check.cap] == new
    if abort is None:
        assert check.abort is None
    else:
        assert check.abort is not None and check.abort.startswith(abort), check.abort


def test_a_gateway_refusal_is_the_reason_given() -> None:
    check = decisions.budget_check(Budget(max_tokens_per_worker=5), {1: S(tokens=9, refused="over 5 tokens")}, None, ())
    assert check.cap == (decisions.Overrun(1, "the model gateway refused it: over 5 tokens"),)


WARNINGS: dict[str, tuple[dict[str, Any], dict[int, decisions.Spend], set[str], list[str]]] = {
    # (budget, each worker's spend, already warned, the keys warned of now)
    "under-80": ({"max_cost_usd": 1.0}, {1: S(0.3), 2: S(0.49)}, set(), []),
    "fleet-at-80": ({"max_cost_usd": 1.0}, {1: S(0.3), 2: S(0.5)}, set(), ["fleet:max_cost_usd"]),
    "once": ({"max_cost_usd": 1.0}, {1: S(0.9)}, {"fleet:max_cost_usd"}, []),
    "worker-tokens": (
        {"max_tokens_per_worker": 100},
        {1: S(tokens=85), 2: S(tokens=10)},
        set(),
        ["1:max_tokens_per_worker"],
    ),
    "each-cap": (
        {"max_tokens": 100, "max_cost_per_worker_usd": 1.0},
        {1: S(0.8, 50), 2: S(0.1, 40)},
        set(),
        ["fleet:max_tokens", "1:max_cost_per_worker_usd"],
    ),
}


@pytest.mark.parametrize(("caps", "spend", "warned", "new"), WARNINGS.values(), ids=WARNINGS.keys())
def test_budget_warnings(
    caps: dict[str, Any], spend: dict[int, decisions.Spend], warned: set[str], new: list[str]
) -> None:
    assert [w.key for w in decisions.budget_warnings(Budget(**caps), spend, warned)] == new


def test_a_budget_warning_says_whose_cap_and_how_much() -> None:
    (fleet,) = decisions.budget_warnings(Budget(max_cost_usd=2.0), {1: S(1.7)}, ())
    assert fleet.reason() == "85% of the fleet's max_cost_usd spent ($1.70 of $2)"
    (own,) = decisions.budget_warnings(Budget(max_tokens_per_worker=1000), {3: S(tokens=900)}, ())
    assert own.reason() == "90% of worker 3's max_tokens_per_worker spent (900 of 1000 tokens)"


def test_no_budget_is_not_checked() -> None:
    assert not decisions.has_budget(Budget())


FINISHED: dict[str, tuple[list[str], str | None, bool]] = {
    "all-terminal": (["done", "failed", "cancelled"], None, True),
    "one-open": (["done", "running"], None, False),
    "aborted": (["running"], "timeout", True),
}


@pytest.mark.parametrize(("statuses", "aborted", "expected"), FINISHED.values(), ids=FINISHED.keys())
def test_finished(statuses: list[str], aborted: str | None, expected: bool) -> None:
    state = _state()
    state.aborted = aborted
    state.jobs = [Job(id=f"t{i}", role=Role.FINDER, status=JobStatus(s)) for i, s in enumerate(statuses)]
    assert decisions.finished(state) is expected


WAKES: dict[str, tuple[float | None, float | None, float, float]] = {
    # (a job's continue_at, a worker's restart_at, run timeout, seconds to sleep)
    "backstop": (None, None, 7200, BACKSTOP),
    "continue-soon": (NOW + 0.3, None, 7200, 0.3),
    "restart-soon": (None, NOW + 0.5, 7200, 0.5),
    "overdue-has-a-floor": (NOW - 5, None, 7200, 0.02),
    "run-deadline": (None, None, 0.25, 0.25),
}


@pytest.mark.parametrize(("continue_at", "restart_at", "run_timeout", "expected"), WAKES.values(), ids=WAKES.keys())
def test_wake_in(continue_at: float | None, restart_at: float | None, run_timeout: float, expected: float) -> None:
    state = _state()
    state.jobs = [Job(id="t1", role=Role.FINDER, continue_at=continue_at)]
    state.workers[0].restart_at = restart_at
    spec = _spec().model_copy(update={"timeouts": _spec().timeouts.model_copy(update={"run": run_timeout})})
    assert decisions.wake_in(state, spec, NOW) == pytest.approx(expected)


# --- isolation ---------------------------------------------------------------------------------
ISOLATION = {
    "an-audit-is-strict": (None, [Role.FINDER], Isolation.STRICT),
    "writers-stay-strict": (None, [Role.FINDER, Role.FIXER], Isolation.STRICT),
    "asked-shared": (Isolation.SHARED, [Role.FINDER], Isolation.SHARED),
    "asked-strict": (Isolation.STRICT, [Role.FINDER], Isolation.STRICT),
    "asked-strict-with-a-scribe": (Isolation.STRICT, [Role.FINDER, Role.SCRIBE], Isolation.STRICT),
}


@pytest.mark.parametrize(("asked", "roles", "expected"), ISOLATION.values(), ids=ISOLATION.keys())
def test_isolation(asked: Isolation | None, roles: list[Role], expected: Isolation | str) -> None:
    """The same in a container and locally: strict holds in both."""
    tasks = [TaskSpec(goal="g", role=role) for role in roles]
    spec = _spec(isolation=asked).model_copy(update={"tasks": tasks})
    if isinstance(expected, Isolation):
        assert decisions.isolation(spec) is expected
    else:
        with pytest.raises(UsageError, match=expected):
            decisions.isolation(spec)


def test_aider_runs_strict_in_a_container_and_locally() -> None:
    """aider's watcher needs its own pane: it gets the relay's pane socket in a local sandbox and in a
    container (a folder only its uid may enter), so its fleet runs strict in both."""
    spec = _spec(isolation=None).model_copy(update={"agent": "aider"})
    assert decisions.isolation(spec) is Isolation.STRICT


def test_a_controller_that_cannot_switch_uids_runs_shared_and_refuses_strict() -> None:
    """compose's `lead` runs `orch run` in the container after the init dropped CAP_SETUID: shared, said
    so; a spec that asks for strict is refused in one line before anything is made."""
    spec = _spec(isolation=None)
    assert decisions.isolation(spec, can_switch_uids=False) is Isolation.SHARED
    strict = spec.model_copy(update={"verification": _spec(isolation=Isolation.STRICT).verification})
    with pytest.raises(UsageError, match="CAP_SETUID"):
        decisions.isolation(strict, can_switch_uids=False)

"""The controller's decisions, as pure functions: no files, no tmux, no clock (`now` is an argument).

The controller's parts (orch.lead.dispatch, review, recovery and the loop in orch.lead.controller)
ask these what to do and then do it; tests/lead/test_decisions.py checks each as a table.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from orch.agents.registry import get_adapter
from orch.errors import UsageError
from orch.jobs.state import (
    Assignment,
    ControllerState,
    Job,
    JobStatus,
    WorkerBook,
)
from orch.jobs.verification import choose_verifier, eligible
from orch.lead.changes import decisions as change_decisions
from orch.run.records import HookEvent, Isolation, WorkerState
from orch.spec.model import Budget, FleetSpec, Limits, Role

MAX_SEND_ATTEMPTS = 3
BACKSTOP = 1.0
"""Seconds the loop sleeps at most without a file change (deadlines are checked that often)."""
ENDED = (WorkerState.CRASHED, WorkerState.EXITED)


def finished(state: ControllerState) -> bool:
    """Aborted, or every job ended and no change is still being checked or waits in the integration queue."""
    if state.aborted is not None:
        return True
    return all(j.terminal for j in state.jobs) and not change_decisions.checks_pending(state)


def wake_in(state: ControllerState, spec: FleetSpec, now: float) -> float:
    """Seconds the loop may sleep: until the next deadline (run timeout, a continue, a restart), at
    most BACKSTOP."""
    deadlines = [state.started + spec.timeouts.run]
    deadlines += [j.continue_at for j in state.jobs if j.continue_at]
    deadlines += [w.restart_at for w in state.workers if w.restart_at]
    return max(0.02, min([BACKSTOP, *(d - now for d in deadlines)]))


# --- handing out jobs --------------------------------------------------------------------------
def alive(state: ControllerState) -> list[int]:
    """Workers that may still take jobs: not out of the run, not past their budget cap."""
    return [w.n for w in state.workers if w.dead is None and not w.capped]


def awaits_job(book: WorkerBook) -> bool:
    """A worker gets a job when it is in the run, has none and waits for no restart (and, the caller
    checks, its agent is idle)."""
    return not (book.dead or book.capped or book.job is not None or book.restart_at is not None)


def verification_open(state: ControllerState) -> bool:
    return any(not j.terminal for j in state.jobs if j.role in (Role.FINDER, Role.VERIFIER))


@dataclass(frozen=True)
class Pick:
    """Who takes a pending job now: a worker, nobody yet (worker None), or nobody ever (fail)."""

    worker: int | None = None
    fail: str | None = None


def awaits_reproduction(state: ControllerState, job: Job) -> bool:
    """A verification job waits while orch runs its finding's reproduce command (orch.lead.reproduce): its brief
    carries the result."""
    assert job.finding is not None
    item = state.finding(job.finding)
    return item.finding.reproduce is not None and item.reproduced is None


def pick(
    state: ControllerState,
    spec: FleetSpec,
    job: Job,
    free: Collection[int],
    alive: Collection[int],
    plan: Sequence[Assignment] = (),
) -> Pick:
    """A verification job waits for orch's run of its finding's reproduce command, then goes to an eligible
    verifier, never the finder (orch.jobs.verification), a
    review job to an eligible reviewer, never the change's writer (orch.lead.changes.decisions); fixers and
    scribes wait until verification is over; a pinned job (a rebase job: its writer) waits for its worker. A replay
    follows its `plan` instead (`replay_pick`)."""
    if job.role is Role.VERIFIER and awaits_reproduction(state, job):
        return Pick()
    if plan:
        return replay_pick(state, job, free, alive, plan)
    if job.role is Role.VERIFIER:
        if not eligible(state, job, alive):
            return Pick(fail="no worker left that may verify this finding (never its finder)")
        return Pick(choose_verifier(state, spec, job, alive, free))
    if job.role is Role.REVIEWER:
        if not change_decisions.review_eligible(state, job, alive):
            return Pick(fail="no worker left that may review this change (never its writer)")
        return Pick(change_decisions.choose_reviewer(state, spec, job, alive, free))
    if job.role in (Role.FIXER, Role.SCRIBE) and verification_open(state):
        return Pick()
    if job.pin is not None:
        if job.pin not in alive:
            return Pick(fail=f"its worker {job.pin} is out of the run")
        return Pick(job.pin if job.pin in free else None)
    return Pick(min(free))


def replay_pick(
    state: ControllerState, job: Job, free: Collection[int], alive: Collection[int], plan: Sequence[Assignment]
) -> Pick:
    """A replay hands a job to the worker that took it in the recording, once that worker is free and
    this is the next of its recorded jobs not handed out yet (the recording kept the rules: never the
    finder, fixers after verification). A job the recording never handed out fails: the replay went
    another way, and the recording has no answers for it."""
    recorded = next((a.worker for a in plan if a.job == job.id), None)
    if recorded is None:
        return Pick(fail="the recording never handed out this job (the replay went another way)")
    if recorded not in alive:
        return Pick(fail=f"its recorded worker {recorded} is out of the run")
    taken = {j.id for j in state.jobs if j.worker is not None}
    upcoming = next((a.job for a in plan if a.worker == recorded and a.job not in taken), None)
    return Pick(recorded if upcoming == job.id and recorded in free else None)


def send_given_up(job: Job) -> bool:
    """A brief that failed to arrive is sent again on the next dispatch, up to MAX_SEND_ATTEMPTS."""
    return job.send_attempts >= MAX_SEND_ATTEMPTS


# --- settling: when a send or a turn counts as done --------------------------------------------
def brief_delivered(events: Iterable[HookEvent], since: float, pointer: str) -> bool:
    """A brief counts as sent once the worker's hooks show a prompt naming its task file after `since`."""
    prompts = (e for e in events if e.hook_event_name == "UserPromptSubmit" and e.ts >= since)
    return any(pointer in (e.prompt or "") for e in prompts)


def life_events(events: Sequence[HookEvent], since: float | None, ended: str | None = None) -> list[HookEvent]:
    """A worker's hook events of its current life, the one its last restart at `since` began (None: never
    restarted, every event). What its previous life's hooks wrote late is not: a SessionEnd before the new life's
    first SessionStart (respawning a live agent ends its session as the new one boots), and any event of the
    session `ended` (the one a fresh start left: a move into a worktree or checkout)."""
    if since is None:
        return list(events)
    later = [e for e in events if e.ts >= since and (ended is None or e.session_id != ended)]
    start = next((i for i, e in enumerate(later) if e.hook_event_name == "SessionStart"), len(later))
    return [e for e in later[:start] if e.hook_event_name != "SessionEnd"] + later[start:]


def relaunched(events: Iterable[HookEvent], since: float) -> bool:
    """The worker's agent started a new session after `since` and has had no prompt in it yet."""
    later = [e.hook_event_name for e in events if e.ts >= since]
    if "SessionStart" not in later:
        return False
    return "UserPromptSubmit" not in later[len(later) - later[::-1].index("SessionStart") :]


class Watch(StrEnum):
    """What one look at a worker calls for (`watch_step`)."""

    NOTHING = "nothing"
    SETTLE_SEND = "settle-send"
    """Its brief was being sent: check the hooks, or send it again."""
    COLLECT = "collect"
    """Its done flag is there and its turn is over: check the output."""
    TIMED_OUT = "timed-out"
    ENDED = "ended"
    """Its agent crashed or exited: restart it (backoff, limit)."""
    RATE_LIMITED = "rate-limited"
    API_ERROR = "api-error"
    """A transient API error ended its turn: wait and tell it to continue."""
    FATAL_ERROR = "fatal-error"
    IDLE = "idle"
    """Idle without a done flag: maybe nudge it (`nudge`)."""
    WORKING = "working"


RUNNING_STEPS = (Watch.RATE_LIMITED, Watch.API_ERROR, Watch.FATAL_ERROR, Watch.IDLE, Watch.WORKING)
"""Steps of a running job: its permission prompts are noted first."""


def watch_step(
    job: Job | None,
    state: WorkerState,
    detail: str | None,
    last: HookEvent | None,
    done_flag: bool,
    now: float,
    job_timeout: float,
    fatal: Collection[str],
) -> Watch:
    """A done flag counts only once the turn is over (not BUSY); a SENDING brief is settled first."""
    if job is not None and job.status is JobStatus.SENDING:
        return Watch.SETTLE_SEND
    if job is not None and done_flag and state is not WorkerState.BUSY:
        return Watch.COLLECT
    if job is not None and job.sent_at and now - job.sent_at > job_timeout:
        return Watch.TIMED_OUT
    if state in ENDED:
        return Watch.ENDED
    if job is None or job.status is not JobStatus.RUNNING:
        return Watch.NOTHING
    if state is WorkerState.RATE_LIMITED and last is not None:
        return Watch.RATE_LIMITED
    if state is WorkerState.ERROR and last is not None and detail not in fatal:
        return Watch.API_ERROR
    if state is WorkerState.ERROR:
        return Watch.FATAL_ERROR
    if state is WorkerState.IDLE:
        return Watch.IDLE
    return Watch.WORKING


# --- limits ------------------------------------------------------------------------------------
class Nudge(StrEnum):
    WAIT = "wait"
    NUDGE = "nudge"
    GIVE_UP = "give-up"


def nudge(job: Job, last: HookEvent | None, now: float, limits: Limits) -> Nudge:
    """An idle worker is nudged after `nudge_after` seconds without a prompt or a hook event, at most
    `max_nudges` times per job; then the job fails."""
    since = max(last.ts if last else 0.0, job.last_prompt_at or 0.0)
    if now - since < limits.nudge_after:
        return Nudge.WAIT
    return Nudge.GIVE_UP if job.nudges >= limits.max_nudges else Nudge.NUDGE


def may_correct(job: Job, limits: Limits) -> bool:
    """A rejected output is sent back with what is wrong at most `max_corrections` times per job."""
    return job.corrections < limits.max_corrections


class Retry(StrEnum):
    HOLD = "hold"
    """Nothing new: keep waiting (or nothing to wait for)."""
    WAIT = "wait"
    """A new failed turn: wait, then continue."""
    GIVE_UP = "give-up"
    CONTINUE = "continue"
    """The wait is over: tell the worker to continue."""


def retry(job: Job, last: HookEvent, now: float, limits: Limits) -> Retry:
    """A turn that ended on a rate limit or a transient API error: each new one counts against
    `max_rate_limit_waits`; after the wait (job.continue_at) the worker is told to continue."""
    if last.ts > job.handled_event_ts:
        return Retry.GIVE_UP if job.rate_waits + 1 > limits.max_rate_limit_waits else Retry.WAIT
    if job.continue_at is not None and now >= job.continue_at:
        return Retry.CONTINUE
    return Retry.HOLD


def continue_wait(fallback: float, gateway_until: float | None, failed_at: float, now: float) -> tuple[float, str]:
    """Seconds before telling a worker whose turn ended on a rate limit or an API error to continue.

    The gateway saw the upstream's answer and its retry-after (`rate_limited_until` in usage.json): when
    that limit still held as the turn failed (until >= failed_at), wait until it lifts, not a minute
    more (0 when it already has). Without one (no gateway, a 5xx without retry-after, a limit that had
    ended before the turn failed): the spec's own wait (`fallback`). With where it came from: "gateway"
    or "spec"."""
    if gateway_until is None or gateway_until < failed_at:
        return fallback, "spec"
    return round(max(0.0, gateway_until - now), 1), "gateway"


def restart_delay(restarts: int, limits: Limits) -> float:
    """Seconds before restarting a crashed worker: `restart_backoff` doubled per earlier restart, capped."""
    return min(limits.restart_backoff_max, limits.restart_backoff * 2.0**restarts)


class Crash(StrEnum):
    OUT = "out"
    """Restart limit reached: the worker is out of the run."""
    SCHEDULE = "schedule"
    """Just seen: restart it after `restart_delay`."""
    WAIT = "wait"
    RESTART = "restart"


def crash(book: WorkerBook, now: float, limits: Limits) -> Crash:
    if book.restart_at is None:
        return Crash.OUT if book.restarts >= limits.max_restarts else Crash.SCHEDULE
    return Crash.WAIT if now < book.restart_at else Crash.RESTART


def relaunch_refused(state: ControllerState, limits: Limits) -> str | None:
    """Why the fleet's dead tmux server may not be relaunched (limit reached), or None."""
    if state.relaunches >= limits.max_relaunches:
        return f"the fleet's tmux server is gone ({state.relaunches} of {limits.max_relaunches} relaunches used)"
    return None


# --- budget ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Spend:
    """What one worker used so far, as the controller sees it."""

    cost_usd: float = 0.0
    tokens: int = 0
    refused: str | None = None
    """Why the model gateway refuses its requests now (its budget), or None."""


@dataclass(frozen=True)
class Overrun:
    worker: int
    reason: str


@dataclass(frozen=True)
class BudgetCheck:
    cap: Sequence[Overrun] = field(default_factory=tuple)
    """Workers past a cap that were not capped yet: no further jobs, their running job fails."""
    abort: str | None = None
    """Why the run stops: the fleet is past its budget."""


def budget_check(
    budget: Budget, spend: Mapping[int, Spend], fleet_refused: str | None, capped: Collection[int]
) -> BudgetCheck:
    """The gateway's refusals decide first (it enforces the caps it was sent, at or over); the
    controller's own sums count too, for a run whose gateway did not answer or that has none (then only
    the status lines' cost is known)."""
    over = []
    for n, used in spend.items():
        if n in capped:
            continue
        why = _worker_overrun(budget, used)
        if why is not None:
            over.append(Overrun(n, why))
    return BudgetCheck(tuple(over), _fleet_overrun(budget, spend.values(), fleet_refused))


def _worker_overrun(budget: Budget, used: Spend) -> str | None:
    if used.refused is not None:
        return f"the model gateway refused it: {used.refused}"
    cost, tokens = budget.max_cost_per_worker_usd, budget.max_tokens_per_worker
    if cost is not None and used.cost_usd > cost:
        return f"its cost ${used.cost_usd:.4f} passed its cap ${cost:g}"
    if tokens is not None and used.tokens > tokens:
        return f"its {used.tokens} tokens passed its cap of {tokens}"
    return None


def _fleet_overrun(budget: Budget, spend: Iterable[Spend], refused: str | None) -> str | None:
    if refused is not None:
        return f"the model gateway refused the fleet: {refused}"
    used = list(spend)
    cost, tokens = sum(s.cost_usd for s in used), sum(s.tokens for s in used)
    if budget.max_cost_usd is not None and cost > budget.max_cost_usd:
        return f"the fleet's cost ${cost:.4f} passed the budget ${budget.max_cost_usd:g}"
    if budget.max_tokens is not None and tokens > budget.max_tokens:
        return f"the fleet's {tokens} tokens passed the budget of {budget.max_tokens}"
    return None


WARN_AT = 0.8
"""The share of a budget cap spent that is worth a person's attention (orch.notify: budget-warning)."""


@dataclass(frozen=True)
class BudgetWarning:
    key: str
    """`fleet:max_cost_usd`, `2:max_tokens_per_worker`: each is warned of once."""
    worker: int | None
    cap: str
    used: float
    limit: float

    def reason(self) -> str:
        whose = f"worker {self.worker}'s" if self.worker is not None else "the fleet's"
        money = self.cap.endswith("usd")
        shown = (f"${self.used:.2f} of ${self.limit:g}") if money else f"{self.used:.0f} of {self.limit:g} tokens"
        return f"{self.used / self.limit:.0%} of {whose} {self.cap} spent ({shown})"


def budget_warnings(budget: Budget, spend: Mapping[int, Spend], warned: Collection[str]) -> list[BudgetWarning]:
    """The caps WARN_AT spent (or more) that were not warned of yet."""
    fleet = (sum(s.cost_usd for s in spend.values()), sum(s.tokens for s in spend.values()))
    sums: list[tuple[int | None, str, float]] = [(None, "max_cost_usd", fleet[0]), (None, "max_tokens", fleet[1])]
    for n, used in spend.items():
        sums += [(n, "max_cost_per_worker_usd", used.cost_usd), (n, "max_tokens_per_worker", used.tokens)]
    found = []
    for worker, cap, used_now in sums:
        limit = getattr(budget, cap)
        key = f"{'fleet' if worker is None else worker}:{cap}"
        if limit is not None and used_now >= WARN_AT * limit and key not in warned:
            found.append(BudgetWarning(key, worker, cap, float(used_now), float(limit)))
    return found


def has_budget(budget: Budget) -> bool:
    return any(cap is not None for cap in budget.model_dump().values())


# --- isolation ---------------------------------------------------------------------------------
def isolation(spec: FleetSpec, can_switch_uids: bool = True) -> Isolation:
    """How far a run's workers are kept apart: what the spec asks, else strict wherever it can hold (every
    agent able to; in a container each worker has its own uid, on this machine its own bubblewrap sandbox);
    UsageError where strict was asked and cannot. Writers do not lower it: each writes only its own
    worktree (orch.lead.changes.decisions), never the tree under audit. `can_switch_uids`: False for a controller
    inside a container that cannot start processes as other uids (orch.run.uids.can_switch_uids)."""
    agents = {agent for agent, _ in spec.agent_models().values()}
    unable = sorted(agent for agent in agents if not get_adapter(agent).can_run_strict())
    asked = spec.verification.isolation
    if asked is Isolation.STRICT:
        if not can_switch_uids:
            raise UsageError(
                "verification.isolation: strict, but this controller runs in a container without the means to "
                "give workers uids of their own (it was started without CAP_SETUID)",
                hint="run the spec from the host (orch run FLEET.yaml starts a container that can), or set "
                "verification.isolation: shared",
            )
        if unable:
            raise UsageError(
                f"verification.isolation: strict, but {', '.join(unable)} cannot run under strict isolation yet",
                hint="set verification.isolation: shared",
            )
        return Isolation.STRICT
    if asked is Isolation.SHARED or unable or not can_switch_uids:
        return Isolation.SHARED
    return Isolation.STRICT

"""The automated lead: runs a fleet spec to completion where the run's tmux server lives.

One loop, woken by inotify on the run folder and the workers' hook logs (a one-second backstop
covers deadlines): collect done flags and check the outputs, tell a worker exactly what is wrong
(up to a limit), nudge idle workers, wait out rate limits, answer or report permission prompts,
restart crashed workers (backoff, limit), hand out jobs (verification never to the finder), then
report and tear down. It spends no model tokens: state comes from hooks and files.

Every action is a line in events.jsonl, and the state is saved to controller.json after every change,
so `orch run --resume NAME` picks up where a killed controller stopped.

This module is the loop; its parts work at one shared desk (orch.lead.base): dispatch (handing out
jobs and briefs), review (checking outputs, verdicts, failing jobs) and recovery (restarts, relaunches,
retries, nudges). What to do is decided by pure functions in orch.lead.decisions.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import select
import time
from collections.abc import Iterator

from orch import signals
from orch.errors import UsageError
from orch.fleet import control
from orch.fleet.watchdog import Watchdog
from orch.fleet.workerstate import FATAL_ERRORS
from orch.gateway.modeldir import unbilled
from orch.jobs.state import ControllerState, Job, JobStatus, Outcome, WorkerBook
from orch.lead import briefs, decisions, outcome, treecheck
from orch.lead.acceptance import Review
from orch.lead.base import Desk
from orch.lead.changes import start
from orch.lead.decisions import RUNNING_STEPS, Watch
from orch.lead.dispatch import Dispatch
from orch.lead.recovery import Recovery
from orch.lead.reproduce import Reproducing
from orch.recording.plan import Cassette
from orch.report.render import write_reports
from orch.run.events import Event
from orch.run.files import atomic_write, read_model
from orch.run.folder import RunFolder
from orch.run.records import Isolation, PermissionAnswer, WorkerState
from orch.spec.model import Dispatch as DispatchMode
from orch.spec.model import FleetSpec, PermissionPolicy
from orch.waits import IN_ATTRIB, IN_CLOSE_WRITE, IN_CREATE, IN_MODIFY, IN_MOVED_TO, Inotify

log = logging.getLogger(__name__)


def initial_state(run: RunFolder, spec: FleetSpec, cassette: Cassette | None = None) -> ControllerState:
    """A new run's books; a replay takes the recording's nonce (the same job tokens, so the same briefs)
    and its plan of who takes which job."""
    state = ControllerState(run=run.name)
    if cassette is not None:
        state.nonce, state.replay_of, state.replay = cassette.nonce, str(cassette.root), list(cassette.plan)
    for n, (agent, model) in spec.agent_models().items():
        state.workers.append(WorkerBook(n=n, agent=agent, model=model))
    for i, (task, task_id) in enumerate(zip(spec.tasks, spec.task_ids(), strict=True), 1):
        pin = task.worker if task.worker is not None else (i if spec.dispatch is DispatchMode.PER_WORKER else None)
        state.jobs.append(Job(id=task_id, role=task.role, task=task_id, pin=pin))
    return state


@contextlib.contextmanager
def controller_lock(run: RunFolder) -> Iterator[None]:
    """One controller per run (flock; works across the host and the run's container on a bind mount)."""
    fd = os.open(run.controller_lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(
                f"another controller is driving run {run.name!r}", hint="wait for it, or stop it first"
            ) from None
        yield
    finally:
        os.close(fd)


class Controller:
    """The loop: each step looks at every worker and routes what it sees to the controller's parts."""

    def __init__(self, run: RunFolder, spec: FleetSpec, state: ControllerState) -> None:
        self.desk = Desk(run, spec, state)
        self.run, self.spec, self.state = run, spec, state
        self.review = Review(self.desk)
        self.reproducing = Reproducing(self.desk)
        self.dispatch = Dispatch(self.desk, self.review)
        self.recovery = Recovery(self.desk, self.review, self.dispatch)
        self.watchdog = Watchdog(run, self.desk.info, [w.n for w in state.workers], self.desk.confinement)

    def run_to_end(self) -> Outcome:
        with controller_lock(self.run):
            if self.state.outcome is not None:
                self.desk.event(Event.RESUME_FINISHED_RUN)
                write_reports(self.run, self.spec, self.state)
                return self.state.outcome
            self.reconcile()
            if self.spec.writer_tasks() and self.spec.checks:
                start.ensure_baseline(self.run, self.spec)  # a container run's checks on the base, once
            if self.desk.info.isolation is not Isolation.STRICT and not treecheck.note(self.run, self.desk.workdir):
                self.desk.event(Event.TREE_NOT_NOTED, files=treecheck.MAX_FILES)
            write_permission_policy(self.run, self.spec.permissions)
            notifier = _notifier(self.run)
            self.watchdog.start()
            try:
                while not decisions.finished(self.state):
                    self.step()
                    if decisions.finished(self.state):
                        break
                    self.wait(notifier)
            finally:
                # Every running check killed, on any way out (a finished run, an error, Ctrl-C); a change still
                # being checked stays so in controller.json unless the run itself ended (finish).
                self.review.writing.stop_checks(ended_run=decisions.finished(self.state))
                self.watchdog.close()
                self.over_caps()
                if notifier is not None:
                    notifier.close()
            return self.finish()

    def wait(self, notifier: Inotify | None) -> None:
        """Until a file of the run changes, a check ends (the pool's pipe) or the next deadline."""
        timeout = decisions.wake_in(self.state, self.spec, time.time())
        if notifier is None:  # no inotify: the deadline-bounded poll is the wait
            timeout = min(timeout, 0.2)
        fds = [self.desk.checks.fd] + ([notifier.fd] if notifier is not None else [])
        with contextlib.suppress(InterruptedError):
            select.select(fds, [], [], timeout)
        if notifier is not None:
            notifier.wait(0)  # drain what is queued

    def step(self) -> None:
        panes = self.desk.server.panes_if_running()
        self.desk.panes = panes or {}
        if not self.desk.panes and not self.recovery.relaunch_fleet(server_running=panes is not None):
            return
        self.recovery.keep_gateway()
        if self.state.aborted is not None:
            return  # the gateway is gone for good
        self.recovery.keep_relay()
        self.over_caps()
        now = time.time()
        if now > self.state.started + self.spec.timeouts.run:
            self.review.abort(f"the run took longer than {self.spec.timeouts.run:g}s")
            return
        if self.check_budget():
            return
        self.review.writing.collect_checks()  # what the check pool finished (it starts what has room)
        self.reproducing.collect()  # the findings' reproduce commands: their verifiers wait for them
        for book in self.state.workers:
            if book.dead is None:
                self.watch(book)
        self.dispatch.dispatch()

    def reconcile(self) -> None:
        """On (re)start: settle briefs caught mid-send, re-point relaunched workers, and file away the
        results of jobs accepted just before a previous controller died."""
        self.desk.panes = self.desk.server.panes_if_running() or {}
        if not self.desk.panes:
            raise UsageError(
                f"the workers of run {self.run.name!r} are gone (tmux server not running)",
                hint=f"`orch up {self.run.name} --resume` brings them back",
            )
        self.review.writing.stop_leftover_checks()  # before any check starts (the base's, a gate's)
        for book in self.state.workers:
            ended = [j for j in self.state.jobs if j.worker == book.n and j.ended_at is not None]
            if book.job is None and ended and self.run.done(book.n).exists():
                self.review.archive_result(max(ended, key=lambda j: j.ended_at or 0.0), book.n)
        self.desk.sync_gateway()
        done = sum(j.status is JobStatus.DONE for j in self.state.jobs)
        self.desk.event(Event.CONTROLLER_STARTED, pid=os.getpid(), jobs_done=done)
        # A verdict is saved before its confirm round is opened: a controller that died in between left
        # a survivor with no round 3. Opening it again is idempotent (round 3 jobs exist afterwards).
        for finding in self.state.findings:
            self.review.advance(finding.id)
        self.review.writing.untaken()  # a writer job done with no change (a controller before one save)
        for change in self.state.changes:  # likewise a change whose reviews settled just before the death
            self.review.writing.write_row(change)  # its row, in case the death came between its save and it
            self.review.writing.advance(change.id)
        self.recovery.repoint_relaunched()

    def watch(self, book: WorkerBook) -> None:
        n = book.n
        job = self.state.job(book.job) if book.job else None
        state, detail, last = self.desk.worker_state(n)
        now = time.time()
        if state is WorkerState.BOOTING and self.recovery.restart_booting(book, job, now):
            return
        limits = self.spec.limits
        step = decisions.watch_step(
            job, state, detail, last, self.run.done(n).exists(), now, self.spec.timeouts.job, FATAL_ERRORS
        )
        if step is Watch.ENDED:
            if self.watchdog.stopping(n):  # its cap's kill: over_caps() fails its job first, then it restarts
                return  # (not pointed back at the job that broke a cap); no helper of ours meets the kill
            self.recovery.handle_crash(book, job, detail or state.value)
            return
        if job is None or step is Watch.NOTHING:
            return
        if step is Watch.SETTLE_SEND:
            self.dispatch.settle_send(job, n, resumed=False)
        elif step is Watch.COLLECT:
            self.review.collect(job, n)
        elif step is Watch.TIMED_OUT:
            self.review.fail(job, f"not finished within {self.spec.timeouts.job:g}s")
        if step not in RUNNING_STEPS:
            return
        self.recovery.note_permissions(job, n)
        if step is Watch.RATE_LIMITED and last is not None:
            self.recovery.retry_after(
                job, n, last, Event.RATE_LIMITED, detail or "rate limited", limits.rate_limit_wait
            )
        elif step is Watch.API_ERROR and last is not None:
            reason = f"API error {detail or 'unknown'}"
            self.recovery.retry_after(job, n, last, Event.API_ERROR, reason, limits.restart_backoff)
        elif step is Watch.FATAL_ERROR:
            self.review.fail(job, f"the agent reported an error it cannot recover from: {detail}")
        elif step is Watch.IDLE:
            self.recovery.nudge(job, n, last, now)

    def over_caps(self) -> None:
        """Workers the watchdog stopped past a cap (orch.fleet.watchdog): flag each, fail its job. The worker's
        agent was killed with the rest of its processes; recovery restarts it as after any crash."""
        for breach, killed in self.watchdog.take():
            book = self.state.book(breach.worker)
            reason = breach.reason()
            self.desk.event(
                Event.OVER_CAP,
                breach.worker,
                job=book.job,
                cap=breach.cap,
                used=breach.used,
                limit=breach.limit,
                killed=killed,
                reason=reason,
            )
            if book.job is not None:
                self.review.fail(self.state.job(book.job), f"stopped by the run's caps: {reason}")

    def check_budget(self) -> bool:
        """Stop workers past their own budget (no new jobs, the running one fails); True when the fleet's
        budget stopped the run. Each overrun is one budget-exceeded event."""
        budget = self.spec.budget
        if not decisions.has_budget(budget):
            return False
        spend, fleet_refused, source = self.spend()
        capped = {w.n for w in self.state.workers if w.capped}
        if fleet_refused is not None or any(s.refused and n not in capped for n, s in spend.items()):
            # A refusal's gateway.jsonl line can be ahead of usage.json: read the usage it was refused on, so the
            # 80 % warning and the overrun (and the report's cost) agree.
            self.desk.gateway.settle()
            spend, fleet_refused, source = self.spend()
        for warning in decisions.budget_warnings(budget, spend, self.state.budget_warned):
            self.state.budget_warned.append(warning.key)
            self.desk.save()
            data = {"cap": warning.cap, "used": warning.used, "limit": warning.limit, "reason": warning.reason()}
            self.desk.event(Event.BUDGET_WARNING, warning.worker, **data)
        check = decisions.budget_check(budget, spend, fleet_refused, capped)
        for over in check.cap:
            book = self.state.book(over.worker)
            book.capped = True
            self.desk.save()
            used = spend[over.worker]
            self.desk.event(
                Event.BUDGET_EXCEEDED,
                over.worker,
                reason=over.reason,
                source=source,
                cost_usd=used.cost_usd,
                tokens=used.tokens,
                job=book.job,
            )
            if book.job is not None:
                self.review.fail(self.state.job(book.job), f"budget exceeded: {over.reason}")
        if check.abort is not None:
            self.desk.event(Event.BUDGET_EXCEEDED, reason=check.abort, source=source)
            self.review.abort(check.abort)
            return True
        return False

    def spend(self) -> tuple[dict[int, decisions.Spend], str | None, str]:
        """Each worker's usage, the fleet's refusal, and where they came from: the gateway's usage.json
        and refusals, or (a run without a gateway) the cost on the workers' status lines."""
        usage = self.desk.gateway.usage()
        if usage is None:
            costs = {b.n: self.run.status_line_info(b.n) for b in self.state.workers}
            spend = {n: decisions.Spend(cost_usd=(line.cost_usd or 0.0) if line else 0.0) for n, line in costs.items()}
            return spend, None, "status-line"
        refused = self.desk.gateway.refusals()
        spend = {}
        for book in self.state.workers:
            worker = usage.workers.get(book.n)
            cost, tokens = (worker.cost_usd, worker.total) if worker else (0.0, 0)
            spend[book.n] = decisions.Spend(cost_usd=cost, tokens=tokens, refused=refused.get(book.n))
        return spend, refused.get(None), "gateway"

    def finish(self) -> Outcome:
        """The outcome, its event (which tells a person the run ended), the reports, then the fleet torn down:
        all of it whole. Told the run ended, a person may close the terminal at once: a signal that comes
        meanwhile (SIGHUP, SIGTERM) is acted on after the teardown, not in the middle of it, which left
        what it had not stopped yet (the relay, the gateway) running."""
        with signals.held():
            return self._finish()

    def _finish(self) -> Outcome:
        ended = self.state.outcome = outcome.decide(self.state, self.spec)
        self.state.finished = time.time()
        self.desk.save()
        self.desk.gateway.settle()  # the last answers' usage, before the report (and the run's end) reads it
        cost = sum(s.cost_usd for s in self.spend()[0].values())
        usage = self.desk.gateway.usage()
        free = unbilled(usage.billed if usage else None, self.spec.offline, self.state.replay_of is not None)
        self.desk.event(Event.FINISHED, exit_code=ended.exit_code, reason=ended.reason, status=ended.status,
                        cost_usd=round(cost, 6), unbilled=free)  # fmt: skip
        try:
            write_reports(self.run, self.spec, self.state)
        finally:  # reports that cannot be written (exit 2) still leave no fleet behind
            if self.spec.teardown:
                control.kill(self.run, self.desk.confinement)
        return ended


def _notifier(run: RunFolder) -> Inotify | None:
    try:
        notifier = Inotify()
        mask = IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE | IN_ATTRIB
        notifier.add_watch(run.root, mask)
        notifier.add_watch(run.state_dir, mask)
    except OSError:
        log.info("inotify is not available: the controller polls")
        return None
    return notifier


def write_permission_policy(run: RunFolder, policy: PermissionPolicy) -> None:
    """What the workers' PermissionRequest hook answers (read by orch.run.hookwriter on each prompt)."""
    answers = {
        PermissionPolicy.APPROVE: PermissionAnswer(answer="allow"),
        PermissionPolicy.DENY: PermissionAnswer(answer="deny", message=briefs.PERMISSION_DENIED),
        PermissionPolicy.REPORT: PermissionAnswer(answer="ask"),
    }
    atomic_write(run.permission_policy, answers[policy].model_dump_json() + "\n")


def write_spec(run: RunFolder, spec: FleetSpec) -> None:
    """The spec as run; its `notify:` with only the fields it set, which stay over the user's file on --resume."""
    data = {**spec.model_dump(mode="json"), "notify": spec.notify.model_dump(mode="json", exclude_unset=True)}
    atomic_write(run.fleet_spec, json.dumps(data, indent=2) + "\n")


def read_spec(run: RunFolder) -> FleetSpec:
    missing = UsageError(f"run {run.name!r} has no fleet spec", hint="it was not started by `orch run`")
    return read_model(run.fleet_spec, FleetSpec, missing)

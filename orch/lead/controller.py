"""The automated lead: runs a fleet spec to completion where the run's tmux server lives.

One loop, woken by inotify on the run folder and the workers' hook logs (a one-second backstop
covers deadlines): collect done flags and check the outputs, tell a worker exactly what is wrong
(up to a limit), nudge idle workers, wait out rate limits, answer or report permission prompts,
restart crashed workers (backoff, limit), hand out jobs (verification never to the finder), then
report and tear down. It spends no model tokens: state comes from hooks and files.

Every action is a line in events.jsonl, and the state is saved to controller.json after every change,
so `orch run --resume NAME` picks up where a killed controller stopped.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from orch.container import backends
from orch.errors import DeliveryError, OrchError, SandboxError, UsageError
from orch.fleet import launch, talk, watch
from orch.fleet.tmux import PaneInfo
from orch.fleet.workerstate import FATAL_ERRORS, derive_state
from orch.lead import briefs
from orch.lead.findings import Finding, Problem, bash_commands, check_findings, check_verdict, result_problems
from orch.lead.jobs import (
    AcceptedFinding,
    AcceptedVerdict,
    ControllerState,
    FindingStatus,
    Flag,
    Job,
    JobStatus,
    Outcome,
    Stance,
    WorkerBook,
    save_state,
)
from orch.lead.report import write_reports
from orch.lead.spec import Dispatch, FleetSpec, PermissionPolicy, Role
from orch.lead.verification import (
    CONFIRM_ROUND,
    VERIFY_ROUND,
    choose_verifier,
    eligible,
    finding_status,
    first_stance,
    needs_confirm_round,
    new_verification_jobs,
)
from orch.run import bus
from orch.run.folder import RunFolder, atomic_write, read_model
from orch.run.records import ControllerEvent, HookEvent, PermissionAnswer, WorkerState
from orch.waits import IN_ATTRIB, IN_CLOSE_WRITE, IN_CREATE, IN_MODIFY, IN_MOVED_TO, Inotify

log = logging.getLogger(__name__)

EXIT_PASSED = 0
EXIT_NOT_CONFIRMED = 4
EXIT_FAILED = 5
MAX_SEND_ATTEMPTS = 3
BACKSTOP = 1.0
ENDED = (WorkerState.CRASHED, WorkerState.EXITED)


def initial_state(run: RunFolder, spec: FleetSpec) -> ControllerState:
    state = ControllerState(run=run.name)
    for n, (agent, model) in spec.kinds().items():
        state.workers.append(WorkerBook(n=n, agent=agent, model=model))
    for i, (task, task_id) in enumerate(zip(spec.tasks, spec.task_ids(), strict=True), 1):
        pin = task.worker if task.worker is not None else (i if spec.dispatch is Dispatch.PER_WORKER else None)
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
    def __init__(self, run: RunFolder, spec: FleetSpec, state: ControllerState) -> None:
        self.run = run
        self.spec = spec
        self.state = state
        self.info = run.info()
        self.workdir = Path(self.info.workdir)
        self.server = launch.server_for(self.info)
        self.tasks = dict(zip(spec.task_ids(), spec.tasks, strict=True))
        self._panes: dict[int, PaneInfo] = {}

    # --- bookkeeping -------------------------------------------------------------------------------
    def save(self) -> None:
        save_state(self.run, self.state)

    def event(self, name: str, worker: int | None = None, **data: Any) -> None:
        self.run.log_event(ControllerEvent(event=name, worker=worker, data=data))

    def events_of(self, n: int) -> Sequence[HookEvent]:
        """Worker n's hook events of its current life (after its last restart)."""
        events = self.run.hook_events(n)
        since = self.state.book(n).restarted_at
        return [e for e in events if e.ts >= since] if since else events

    def worker_state(self, n: int) -> tuple[WorkerState, str | None, HookEvent | None]:
        events = self.events_of(n)
        last = events[-1] if events else None
        state, detail = derive_state(last, self._panes.get(n))
        return state, detail, last

    def alive(self) -> list[int]:
        """Workers that may still take jobs: not out of the run, not past their budget cap."""
        return [w.n for w in self.state.workers if w.dead is None and not w.capped]

    # --- the loop ----------------------------------------------------------------------------------
    def run_to_end(self) -> Outcome:
        with controller_lock(self.run):
            if self.state.outcome is not None:
                self.event("resume-finished-run")
                self.write_reports()
                return self.state.outcome
            self.reconcile()
            write_permission_policy(self.run, self.spec.permissions)
            notifier = _notifier(self.run)
            try:
                while not self.finished():
                    self.step()
                    if self.finished():
                        break
                    self.wait(notifier)
            finally:
                if notifier is not None:
                    notifier.close()
            return self.finish()

    def finished(self) -> bool:
        return self.state.aborted is not None or all(j.terminal for j in self.state.jobs)

    def wait(self, notifier: Inotify | None) -> None:
        now = time.time()
        deadlines = [self.state.started + self.spec.timeouts.run]
        for job in self.state.jobs:
            if job.continue_at:
                deadlines.append(job.continue_at)
        for book in self.state.workers:
            if book.restart_at:
                deadlines.append(book.restart_at)
        timeout = max(0.02, min([BACKSTOP, *(d - now for d in deadlines)]))
        if notifier is not None:
            notifier.wait(timeout)
        else:  # no inotify: the deadline-bounded poll is the wait
            time.sleep(min(timeout, 0.2))

    def step(self) -> None:
        panes = self.server.panes_if_running()
        self._panes = panes or {}
        if not self._panes and not self.relaunch_fleet(server_running=panes is not None):
            return
        now = time.time()
        if now > self.state.started + self.spec.timeouts.run:
            self.abort(f"the run took longer than {self.spec.timeouts.run:g}s")
            return
        if self.check_budget():
            return
        for book in self.state.workers:
            if book.dead is None:
                self.watch(book)
        self.dispatch()

    # --- start and resume --------------------------------------------------------------------------
    def reconcile(self) -> None:
        """On (re)start: settle briefs caught mid-send, re-point relaunched workers, and file away the
        results of jobs accepted just before a previous controller died."""
        self._panes = self.server.panes_if_running() or {}
        if not self._panes:
            raise UsageError(
                f"the workers of run {self.run.name!r} are gone (tmux server not running)",
                hint=f"`orch up {self.run.name} --resume` brings them back",
            )
        for book in self.state.workers:
            ended = [j for j in self.state.jobs if j.worker == book.n and j.ended_at is not None]
            if book.job is None and ended and self.run.done(book.n).exists():
                self.archive_result(max(ended, key=lambda j: j.ended_at or 0.0), book.n)
        self.event(
            "controller-started", pid=os.getpid(), jobs_done=sum(j.status is JobStatus.DONE for j in self.state.jobs)
        )
        self.repoint_relaunched()

    def relaunch_fleet(self, server_running: bool) -> bool:
        """The fleet's tmux server died under the controller (OOM killer, `tmux kill-server`): start it
        again on the same folder, sessions resumed, and re-point the workers, up to a limit. False when
        the run was aborted instead."""
        if server_running:  # a server without panes cannot be relaunched in place
            self.abort("the fleet's tmux server has no panes left")
            return False
        limit = self.spec.limits.max_relaunches
        if self.state.relaunches >= limit:
            self.abort(f"the fleet's tmux server is gone ({self.state.relaunches} of {limit} relaunches used)")
            return False
        self.state.relaunches += 1
        self.save()
        self.event("fleet-relaunching", relaunch=self.state.relaunches, limit=limit)
        try:
            backends.sandbox_for(self.run.info(), self.spec.timeouts.boot).resume(self.run.name)
        except OrchError as exc:
            self.abort(f"the fleet's tmux server died and could not be relaunched: {exc.one_line()}")
            return False
        self._panes = self.server.panes()
        self.event("fleet-relaunched", relaunch=self.state.relaunches)
        self.repoint_relaunched()
        return True

    def repoint_relaunched(self) -> None:
        for job in self.state.jobs:
            if job.status is JobStatus.SENDING and job.worker is not None:
                self.settle_send(job, job.worker, resumed=True)
            elif job.status is JobStatus.RUNNING and job.worker is not None and self.relaunched(job, job.worker):
                self.tell(job, job.worker, briefs.restart_prompt(self.run, job, job.worker, "relaunched"), "repoint")
        self.save()

    def relaunched(self, job: Job, n: int) -> bool:
        """Worker n started a new agent session after its last prompt for `job` (its fleet was relaunched)."""
        since = job.last_prompt_at or job.sent_at or 0.0
        later = [e.hook_event_name for e in self.run.hook_events(n) if e.ts >= since]
        if "SessionStart" not in later:
            return False
        return "UserPromptSubmit" not in later[len(later) - later[::-1].index("SessionStart") :]

    def settle_send(self, job: Job, n: int, resumed: bool) -> None:
        """A brief marked SENDING: if the worker's hooks show the pointer arrived, it is RUNNING; else send."""
        since = job.sent_at or 0.0
        pointer = str(self.run.task(n))
        delivered = any(
            e.hook_event_name == "UserPromptSubmit" and e.ts >= since and pointer in (e.prompt or "")
            for e in self.run.hook_events(n)
        )
        if delivered:
            job.status = JobStatus.RUNNING
            job.last_prompt_at = time.time()
            self.save()
            self.archive_brief(job, n)
            self.event("brief-sent", n, job=job.id, confirmed_from_hooks=True, resumed=resumed)
            return
        self.event("brief-not-delivered", n, job=job.id, resumed=resumed)
        self.send_briefs([(job, n)])

    # --- handing out jobs --------------------------------------------------------------------------
    def verification_open(self) -> bool:
        return any(not j.terminal for j in self.state.jobs if j.role in (Role.FINDER, Role.VERIFIER))

    def dispatch(self) -> None:
        free = []
        for book in self.state.workers:
            if book.dead or book.capped or book.job is not None or book.restart_at is not None:
                continue
            state, _, _ = self.worker_state(book.n)
            if state is WorkerState.IDLE:
                free.append(book.n)
        if not free:
            return
        alive = self.alive()
        starting: list[tuple[Job, int]] = []
        for job in [j for j in self.state.jobs if j.status is JobStatus.PENDING]:
            if not free:
                break
            n = self.pick(job, free, alive)
            if n is None:
                continue
            free.remove(n)
            self.assign(job, n)
            starting.append((job, n))
        self.send_briefs(starting)

    def pick(self, job: Job, free: list[int], alive: list[int]) -> int | None:
        if job.role is Role.VERIFIER:
            if not eligible(self.state, job, alive):
                self.fail(job, "no worker left that may verify this finding (never its finder)")
                return None
            return choose_verifier(self.state, self.spec, job, alive, free)
        if job.role in (Role.FIXER, Role.SCRIBE) and self.verification_open():
            return None
        if job.pin is not None:
            if job.pin not in alive:
                self.fail(job, f"its worker {job.pin} is out of the run")
            return job.pin if job.pin in free else None
        return min(free)

    def assign(self, job: Job, n: int) -> None:
        if job.role is Role.VERIFIER:
            assert job.finding is not None
            if self.state.finding(job.finding).finder == n:  # choose_verifier never does this
                raise RuntimeError(f"refusing to let worker {n} verify its own finding {job.finding}")
        self.clear_leftovers(job, n)
        job.worker = n
        self.state.book(n).job = job.id
        self.event("assigned", n, job=job.id, role=job.role.value, finding=job.finding, round=job.round)

    def clear_leftovers(self, job: Job, n: int) -> None:
        """A worker starts a job with no done flag, result or output file lying around."""
        output = self.output_file(job)
        stale = [p for p in (self.run.done(n), self.run.result(n), output) if p is not None and p.exists()]
        for path in stale:
            path.unlink()
        if stale:
            self.event("stale-cleared", n, job=job.id, files=[str(p) for p in stale])

    def output_file(self, job: Job) -> Path | None:
        if job.role is Role.FINDER:
            return self.run.findings_file(job.id)
        if job.role is Role.VERIFIER:
            return self.run.verdict_file(job.id)
        return None

    def send_briefs(self, starting: list[tuple[Job, int]]) -> None:
        """Deliver the briefs of one dispatch round side by side (talk.brief_many)."""
        if not starting:
            return
        texts = {n: self.brief_for(job, n) for job, n in starting}
        for job, n in starting:
            job.status = JobStatus.SENDING
            job.sent_at = time.time()
            job.send_attempts += 1
            self.event("brief-sending", n, job=job.id, attempt=job.send_attempts)
        self.save()
        errors = talk.brief_many(self.run, texts)
        for job, n in starting:
            exc = errors[n]
            if exc is not None:
                self.event("brief-failed", n, job=job.id, error=exc.one_line())
                if job.send_attempts >= MAX_SEND_ATTEMPTS:
                    self.fail(job, f"the brief could not be delivered: {exc.one_line()}")
                continue
            job.status = JobStatus.RUNNING
            job.last_prompt_at = time.time()
            self.archive_brief(job, n)
            self.event("brief-sent", n, job=job.id)
        self.save()

    def archive_brief(self, job: Job, n: int) -> None:
        self.run.jobs_dir.mkdir(exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            shutil.copyfile(self.run.task(n), self.run.job_brief(job.id))

    def brief_for(self, job: Job, n: int) -> str:
        workers = len(self.state.workers)
        if job.role is Role.VERIFIER:
            assert job.finding is not None
            values = briefs.verify_values(self.run, self.state, job, n, self.workdir, workers)
            steps = briefs.offline_verify_steps(self.spec, self.state.finding(job.finding).finding, values)
            return briefs.brief_text(self.spec, Role.VERIFIER, values, steps)
        assert job.task is not None
        task = self.tasks[job.task]
        confirmed = [f for f in self.state.findings if self.status_of(f.id) is FindingStatus.CONFIRMED]
        values = briefs.task_values(self.run, self.state, job, task, n, self.workdir, workers, confirmed)
        steps = briefs.offline_task_steps(self.spec, task, values)
        return briefs.brief_text(self.spec, task.role, values, steps)

    # --- watching a worker -------------------------------------------------------------------------
    def watch(self, book: WorkerBook) -> None:
        n = book.n
        job = self.state.job(book.job) if book.job else None
        state, detail, last = self.worker_state(n)
        now = time.time()
        if job is not None and job.status is JobStatus.SENDING:
            self.settle_send(job, n, resumed=False)
            return
        if job is not None and self.run.done(n).exists() and state is not WorkerState.BUSY:
            self.collect(job, n)
            return
        if job is not None and job.sent_at and now - job.sent_at > self.spec.timeouts.job:
            self.fail(job, f"not finished within {self.spec.timeouts.job:g}s")
            return
        if state in ENDED:
            self.handle_crash(book, job, detail or state.value)
            return
        if job is None or job.status is not JobStatus.RUNNING:
            return
        self.note_permissions(job, n)
        if state is WorkerState.RATE_LIMITED and last is not None:
            self.retry_after(job, n, last, "rate-limited", detail or "rate limited", self.spec.limits.rate_limit_wait)
        elif state is WorkerState.ERROR and last is not None and detail not in FATAL_ERRORS:
            reason = f"API error {detail or 'unknown'}"
            self.retry_after(job, n, last, "api-error", reason, self.spec.limits.restart_backoff)
        elif state is WorkerState.ERROR:
            self.fail(job, f"the agent reported an error it cannot recover from: {detail}")
        elif state is WorkerState.IDLE:
            since = max(last.ts if last else 0.0, job.last_prompt_at or 0.0)
            if now - since >= self.spec.limits.nudge_after:
                self.nudge(job, n)

    def tell(self, job: Job, n: int, text: str, what: str) -> bool:
        self.event(f"{what}-sending", n, job=job.id)
        try:
            talk.send(self.run, n, text)
        except DeliveryError as exc:
            self.event(f"{what}-failed", n, job=job.id, error=exc.one_line())
            return False
        job.last_prompt_at = time.time()
        self.save()
        self.event(f"{what}-sent", n, job=job.id)
        return True

    def nudge(self, job: Job, n: int) -> None:
        if job.nudges >= self.spec.limits.max_nudges:
            self.fail(job, f"idle without a done flag after {job.nudges} nudge(s)")
            return
        job.nudges += 1
        job.last_prompt_at = time.time()
        self.save()
        self.tell(job, n, briefs.nudge_text(self.run, job, n), "nudge")

    def retry_after(self, job: Job, n: int, last: HookEvent, what: str, reason: str, wait: float) -> None:
        """A turn that ended on a rate limit or a transient API error: wait, then tell the worker to
        continue; each failed turn counts against `max_rate_limit_waits`."""
        if last.ts > job.handled_event_ts:
            job.handled_event_ts = last.ts
            job.rate_waits += 1
            if job.rate_waits > self.spec.limits.max_rate_limit_waits:
                self.fail(job, f"still failing ({reason}) after {job.rate_waits - 1} waits")
                return
            job.continue_at = time.time() + wait
            self.save()
            self.event(what, n, job=job.id, reason=reason, wait=wait)
        elif job.continue_at is not None and time.time() >= job.continue_at:
            job.continue_at = None
            self.save()
            self.tell(job, n, briefs.continue_text(job, reason), "continue")

    def note_permissions(self, job: Job, n: int) -> None:
        """Log each permission prompt of the job once: answered by the workers' hook from the policy,
        or (policy report) left on screen for a human, which the bus says."""
        for e in self.events_of(n):
            if e.hook_event_name != "PermissionRequest" or e.ts <= max(job.permissions_seen, job.sent_at or 0.0):
                continue
            job.permissions_seen = e.ts
            self.save()
            answered = {"allow": "permission-allowed", "deny": "permission-denied"}.get(e.orch_decision or "")
            self.event(answered or "permission-wait", n, job=job.id, tool=e.tool_name)
            if answered is None:
                tool = e.tool_name or "a tool"
                bus.post(self.run, None, briefs.permission_wait_text(self.run, n, tool))

    def handle_crash(self, book: WorkerBook, job: Job | None, why: str) -> None:
        n = book.n
        limits = self.spec.limits
        now = time.time()
        if book.restart_at is None:
            if book.restarts >= limits.max_restarts:
                book.dead = f"{why}; restart limit ({limits.max_restarts}) reached"
                self.event("worker-out", n, reason=book.dead)
                if job is not None:
                    self.fail(job, f"worker {n} crashed and may not be restarted again ({why})")
                self.save()
                return
            delay = min(limits.restart_backoff_max, limits.restart_backoff * 2**book.restarts)
            book.restart_at = now + delay
            self.save()
            self.event("crash-seen", n, job=job.id if job else None, why=why, restart_in=delay)
            return
        if now < book.restart_at:
            return
        prompt = briefs.restart_prompt(self.run, job, n, why) if job is not None else None
        book.restarts += 1
        book.restart_at = None
        book.restarted_at = time.time()
        self.save()
        try:
            for attempt in Retrying(
                stop=stop_after_attempt(3),
                wait=wait_exponential(multiplier=0.5, max=5),
                retry=retry_if_exception_type(SandboxError),
                reraise=True,
            ):
                with attempt:
                    launch.restart(self.run, n, prompt)
        except OrchError as exc:
            book.dead = f"restart failed: {exc.one_line()}"
            self.event("worker-out", n, reason=book.dead)
            if job is not None:
                self.fail(job, book.dead)
            self.save()
            return
        if job is not None:
            job.last_prompt_at = time.time()
        self.save()
        self.event("restarted-worker", n, job=job.id if job else None, restarts=book.restarts, why=why)

    # --- outputs -----------------------------------------------------------------------------------
    def collect(self, job: Job, n: int) -> None:
        token = self.state.token(job.id)
        window = self.spec.verification.evidence_window
        if job.role is Role.FINDER:
            findings, problems = check_findings(self.run, job.id, token, n, self.workdir, window)
            if findings is not None:
                self.accept(job, n)
                self.add_findings(job, n, findings.findings)
                self.finish_job(job, n)
                return
        elif job.role is Role.VERIFIER:
            assert job.finding is not None
            commands = bash_commands(self.run.hook_events(n), job.sent_at or 0.0)
            verdict, problems = check_verdict(self.run, job.id, token, job.finding, n, self.workdir, window, commands)
            if verdict is not None:
                assert job.stance is not None
                self.accept(job, n)
                self.state.verdicts.append(
                    AcceptedVerdict(
                        job=job.id, finding=job.finding, verifier=n, round=job.round, stance=job.stance, report=verdict
                    )
                )
                self.finish_job(job, n)
                self.event("verdict-accepted", n, job=job.id, finding=job.finding, verdict=verdict.verdict.value)
                self.advance(job.finding)
                return
        else:
            problems = result_problems(self.run, n)
            if not problems:
                self.accept(job, n)
                self.finish_job(job, n)
                return
        self.reject(job, n, problems)

    def accept(self, job: Job, n: int) -> None:
        job.status = JobStatus.DONE
        job.ended_at = time.time()
        job.problems = []
        self.state.book(n).job = None

    def finish_job(self, job: Job, n: int) -> None:
        """Commit (save), then move the worker's result aside so its next job starts clean."""
        self.save()
        self.event("job-accepted", n, job=job.id, role=job.role.value)
        self.archive_result(job, n)

    def archive_result(self, job: Job, n: int) -> None:
        self.run.jobs_dir.mkdir(exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            shutil.copyfile(self.run.result(n), self.run.job_result(job.id))
        self.run.result(n).unlink(missing_ok=True)
        self.run.done(n).unlink(missing_ok=True)

    def add_findings(self, job: Job, n: int, findings: list[Finding]) -> None:
        assert job.task is not None
        stance = first_stance(self.spec)
        for finding in findings:
            item = AcceptedFinding(id=f"{job.task}-{finding.id}", job=job.id, task=job.task, finder=n, finding=finding)
            self.state.findings.append(item)
            new = new_verification_jobs(
                self.state, item.id, VERIFY_ROUND, stance, self.spec.verification.verifiers_per_finding
            )
            self.state.jobs += new
            self.event("finding-accepted", n, finding=item.id, claim=finding.claim, jobs=[j.id for j in new])
        self.save()

    def advance(self, finding: str) -> None:
        """After a verification job ends: open round 3 for a survivor of round 2."""
        if needs_confirm_round(self.state, self.spec, finding):
            new = new_verification_jobs(
                self.state, finding, CONFIRM_ROUND, Stance.CONFIRM, self.spec.verification.verifiers_per_finding
            )
            self.state.jobs += new
            self.save()
            self.event("confirm-round", finding=finding, jobs=[j.id for j in new])

    def reject(self, job: Job, n: int, problems: list[Problem]) -> None:
        self.state.flags.append(Flag(ts=time.time(), worker=n, job=job.id, role=job.role, problems=problems))
        job.problems = problems
        self.event("output-rejected", n, job=job.id, problems=[p.model_dump(mode="json") for p in problems])
        limit = self.spec.limits.max_corrections
        if job.corrections >= limit:
            self.fail(job, f"output still not acceptable after {job.corrections} correction(s): {problems[0].detail}")
            return
        job.corrections += 1
        self.save()
        self.run.done(n).unlink(missing_ok=True)
        self.tell(job, n, briefs.correction_text(self.run, job, n, problems, job.corrections, limit), "correction")

    def fail(self, job: Job, reason: str) -> None:
        job.status = JobStatus.FAILED
        job.failure = reason
        job.ended_at = time.time()
        n = job.worker
        if n is not None and self.state.book(n).job == job.id:
            self.state.book(n).job = None
        self.save()
        if n is not None:
            self.archive_result(job, n)
        self.event("job-failed", job.worker, job=job.id, reason=reason)
        if job.role is Role.VERIFIER and job.finding is not None:
            self.replace_verifier(job)
            self.advance(job.finding)

    def replace_verifier(self, job: Job) -> None:
        """A verification job that failed gets another verifier if one may still take it."""
        assert job.finding is not None and job.stance is not None
        # Eligible for a new job on this finding and round: the failed job's worker is not (it had one).
        spare = eligible(self.state, job.model_copy(update={"id": "(replacement)"}), self.alive())
        if not spare:
            return
        (new,) = new_verification_jobs(self.state, job.finding, job.round, job.stance, 1)
        self.state.jobs.append(new)
        self.save()
        self.event("verifier-replaced", job=job.id, replacement=new.id)

    # --- budget and ending -------------------------------------------------------------------------
    def check_budget(self) -> bool:
        budget = self.spec.budget
        if budget.max_cost_usd is None and budget.max_cost_per_worker_usd is None:
            return False
        total = 0.0
        for book in self.state.workers:
            line = self.run.status_line_info(book.n)
            cost = line.cost_usd if line and line.cost_usd else 0.0
            total += cost
            cap = budget.max_cost_per_worker_usd
            if cap is not None and cost > cap and not book.capped:
                book.capped = True
                self.save()
                self.event("worker-capped", book.n, cost_usd=cost, cap_usd=cap)
        if budget.max_cost_usd is not None and total > budget.max_cost_usd:
            self.abort(f"the fleet's cost ${total:.4f} passed the budget ${budget.max_cost_usd:g}")
            return True
        return False

    def abort(self, reason: str) -> None:
        self.state.aborted = reason
        for job in self.state.jobs:
            if not job.terminal:
                job.status = JobStatus.CANCELLED
                job.failure = reason
                job.ended_at = time.time()
        for book in self.state.workers:
            book.job = None
        self.save()
        self.event("aborted", reason=reason)

    def status_of(self, finding: str) -> FindingStatus:
        return finding_status(self.state, self.spec, finding)

    def outcome(self) -> Outcome:
        statuses = {f.id: self.status_of(f.id) for f in self.state.findings}
        failed = [j for j in self.state.jobs if j.role is not Role.VERIFIER and j.status is not JobStatus.DONE]
        if self.state.aborted or failed:
            why = self.state.aborted or "; ".join(f"{j.id}: {j.failure or j.status.value}" for j in failed)
            return Outcome(exit_code=EXIT_FAILED, status="failed", reason=why, findings=statuses)
        open_ = {f: s for f, s in statuses.items() if s is not FindingStatus.CONFIRMED}
        if open_:
            why = ", ".join(f"{f} {s.value}" for f, s in open_.items())
            return Outcome(exit_code=EXIT_NOT_CONFIRMED, status="not-confirmed", reason=why, findings=statuses)
        why = (
            f"all tasks done; {len(statuses)} finding(s), all confirmed" if statuses else "all tasks done; no findings"
        )
        return Outcome(exit_code=EXIT_PASSED, status="passed", reason=why, findings=statuses)

    def finish(self) -> Outcome:
        self.state.outcome = self.outcome()
        self.state.finished = time.time()
        self.save()
        self.event("finished", exit_code=self.state.outcome.exit_code, reason=self.state.outcome.reason)
        self.write_reports()
        if self.spec.teardown:
            watch.kill(self.run)
        return self.state.outcome

    def write_reports(self) -> None:
        write_reports(self.run, self.spec, self.state)


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
    atomic_write(run.fleet_spec, spec.model_dump_json(indent=2) + "\n")


def read_spec(run: RunFolder) -> FleetSpec:
    missing = UsageError(f"run {run.name!r} has no fleet spec", hint="it was not started by `orch run`")
    return read_model(run.fleet_spec, FleetSpec, missing)

"""Keeping workers going: restart a crashed worker (backoff, limit), relaunch a fleet whose tmux server
died, re-point relaunched workers at their briefs, wait out rate limits and transient API errors, nudge
idle workers, and note permission prompts. The limits are decided in orch.lead.decisions."""

from __future__ import annotations

import time
from pathlib import Path

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from orch.agents.registry import get_adapter
from orch.backends import registry as backends
from orch.errors import OrchError, SandboxError
from orch.fleet import booting, launch, rungateway
from orch.jobs.state import Job, JobStatus, WorkerBook
from orch.lead import briefs, decisions
from orch.lead.acceptance import Review
from orch.lead.base import CONTINUE, NUDGE, REPOINT, Desk, Part
from orch.lead.decisions import Crash, Nudge, Retry
from orch.lead.dispatch import Dispatch
from orch.run import bus
from orch.run.events import Event
from orch.run.records import HookEvent

SCREEN_EVERY = 1.0
"""Seconds between two looks at a booting restarted worker's screen (each look is a tmux client)."""

PERMISSION_EVENTS = {"allow": Event.PERMISSION_ALLOWED, "deny": Event.PERMISSION_DENIED}
"""The workers' hook answered a permission prompt from the policy (else: PERMISSION_WAIT)."""


class Recovery(Part):
    def __init__(self, desk: Desk, review: Review, dispatch: Dispatch) -> None:
        super().__init__(desk)
        self.review = review
        self.dispatch = dispatch
        self.screen_looked: dict[int, float] = {}  # when a booting worker's screen was last looked at

    # --- the fleet -----------------------------------------------------------------------------
    def relaunch_fleet(self, server_running: bool) -> bool:
        """The fleet's tmux server died under the controller (OOM killer, `tmux kill-server`): start it
        again on the same folder, sessions resumed, and re-point the workers, up to a limit. False when
        the run was aborted instead."""
        if server_running:  # a server without panes cannot be relaunched in place
            self.review.abort("the fleet's tmux server has no panes left")
            return False
        refused = decisions.relaunch_refused(self.state, self.spec.limits)
        if refused is not None:
            self.review.abort(refused)
            return False
        self.state.relaunches += 1
        self.desk.save()
        self.desk.event(Event.FLEET_RELAUNCHING, relaunch=self.state.relaunches, limit=self.spec.limits.max_relaunches)
        try:
            backends.sandbox_for(self.run.info(), self.spec.timeouts.boot).resume(self.run.name)
        except OrchError as exc:
            self.review.abort(f"the fleet's tmux server died and could not be relaunched: {exc.one_line()}")
            return False
        self.desk.panes = self.desk.server.panes()
        self.desk.event(Event.FLEET_RELAUNCHED, relaunch=self.state.relaunches)
        self.desk.sync_gateway()  # the relaunch may have started a new gateway
        self.repoint_relaunched()
        return True

    def keep_gateway(self) -> None:
        """The model gateway's supervisor died under the run (SIGKILL, the OOM killer): start it again. It
        takes back its address and the workers' tokens from its private state, so they carry on; it is
        told the budget and jobs again. In a container the gateway is another uid's, started by the
        container's init under a keeper of that uid, which starts it again itself with the same state
        (orch.container.gatewaykeeper; a worker restart meanwhile waits for it: rungateway.ensure). Only
        its keeper could: the controller holds neither that uid nor the credentials. So a container's
        gateway whose keeper is gone too (the OOM killer took both) ends the run at once, saying so,
        rather than letting every job fail on a model that never answers."""
        info = self.desk.info
        if backends.here().gateway_keeper:
            gone = rungateway.gone_for_good(info)
            if gone is not None:
                self.review.abort(gone)
            return
        if rungateway.lost(info) is None:
            return
        try:
            rungateway.ensure(self.run, info)
        except OrchError as exc:
            self.review.abort(f"the model gateway died and could not be started again: {exc.one_line()}")
            return
        self.desk.sync_gateway()

    def keep_relay(self) -> None:
        """The relay of the workers' sockets died under the run (orch.backends.local.relay): start it again. It serves
        the same folders of sockets, which the running workers' sandboxes see at once."""
        info, confinement = self.desk.info, self.desk.confinement  # the relay runs beside tmux, as this controller
        if not confinement.needs_relay(info) or confinement.relay_running(self.run):
            return
        handle = rungateway.running(info)
        if handle is None:
            return  # the gateway comes first (keep_gateway); the next look starts the relay
        try:
            started = confinement.ensure_relay(self.run, info, handle.url)
        except OrchError as exc:
            self.review.abort(f"the workers' relay died and could not be started again: {exc.one_line()}")
            return
        if started:
            self.desk.event(Event.RELAY_STARTED, by="controller")

    def repoint_relaunched(self) -> None:
        for job in self.state.jobs:
            if job.status is JobStatus.SENDING and job.worker is not None:
                self.dispatch.settle_send(job, job.worker, resumed=True)
            elif job.status is JobStatus.RUNNING and job.worker is not None and self.relaunched(job, job.worker):
                text = briefs.restart_prompt(self.run, job, job.worker, "relaunched")
                self.desk.tell(job, job.worker, text, REPOINT)
        self.desk.save()

    def relaunched(self, job: Job, n: int) -> bool:
        """Worker n started a new agent session after its last prompt for `job` (its fleet was relaunched)."""
        return decisions.relaunched(self.run.hook_events(n), job.last_prompt_at or job.sent_at or 0.0)

    # --- one worker ----------------------------------------------------------------------------
    def handle_crash(self, book: WorkerBook, job: Job | None, why: str) -> None:
        n = book.n
        limits = self.spec.limits
        now = time.time()
        step = decisions.crash(book, now, limits)
        if step is Crash.OUT:
            book.dead = f"{why}; restart limit ({limits.max_restarts}) reached"
            self.desk.event(Event.WORKER_OUT, n, reason=book.dead)
            if job is not None:
                self.review.fail(job, f"worker {n} crashed and may not be restarted again ({why})")
            self.desk.save()
            return
        if step is Crash.SCHEDULE:
            delay = decisions.restart_delay(book.restarts, limits)
            book.restart_at = now + delay
            self.desk.save()
            self.desk.event(Event.CRASH_SEEN, n, job=job.id if job else None, why=why, restart_in=delay)
            return
        if step is Crash.WAIT:
            return
        prompt = briefs.restart_prompt(self.run, job, n, why) if job is not None else None
        book.restarts += 1
        book.restart_at = None
        book.restarted_at, book.ended_session = time.time(), None  # its session resumed: the same id
        self.desk.save()
        try:
            for attempt in Retrying(
                stop=stop_after_attempt(3),
                wait=wait_exponential(multiplier=0.5, max=5),
                retry=retry_if_exception_type(SandboxError),
                reraise=True,
            ):
                with attempt:
                    where = Path(book.cwd) if book.cwd else None
                    launch.restart(self.run, n, self.desk.confinement, prompt, workdir=where, wait=False)
        except OrchError as exc:
            book.dead = f"restart failed: {exc.one_line()}"
            self.desk.event(Event.WORKER_OUT, n, reason=book.dead)
            if job is not None:
                self.review.fail(job, book.dead)
            self.desk.save()
            return
        if job is not None:
            job.last_prompt_at = time.time()
        self.desk.save()
        self.desk.event(Event.RESTARTED_WORKER, n, job=job.id if job else None, restarts=book.restarts, why=why)

    def restart_booting(self, book: WorkerBook, job: Job | None, now: float) -> bool:
        """A worker restarted (by `handle_crash`, or moved into a worktree: orch.lead.changes.writing) that has sent
        no hook of its new life since: one not booted within the spec's `timeouts.boot` is handled as a crash; an
        agent that shows a screen at every start (Codex's "Folder access") has it answered here (looked at once a
        second at most). Nothing waits for it: the loop goes on watching the others meanwhile. True while such a
        screen's agent boots (nothing else to do for it)."""
        n = book.n
        since = book.restarted_at
        if since is None or self.desk.events_of(n):
            return False
        boot = self.spec.timeouts.boot
        if now - since > boot:
            self.handle_crash(book, job, f"did not boot within {boot:g}s of its restart")
            return True
        adapter = get_adapter(self.desk.info.agent_of(n))
        if not any(d.every_start for d in adapter.facts.dialogs):
            return False
        pane = self.desk.panes.get(n)
        if pane is None or pane.dead or now < self.screen_looked.get(n, 0.0) + SCREEN_EVERY:
            return pane is not None and not pane.dead
        self.screen_looked[n] = now
        booting.answer_dialogs(self.run, adapter, self.desk.server, n, pane, late=now - since > booting.DIALOG_GRACE)
        return True

    def nudge(self, job: Job, n: int, last: HookEvent | None, now: float) -> None:
        step = decisions.nudge(job, last, now, self.spec.limits)
        if step is Nudge.WAIT:
            return
        if step is Nudge.GIVE_UP:
            self.review.fail(job, f"idle without a done flag after {job.nudges} nudge(s)")
            return
        job.nudges += 1
        job.last_prompt_at = time.time()
        self.desk.save()
        self.desk.tell(job, n, briefs.nudge_text(self.run, job, n), NUDGE)

    def retry_after(self, job: Job, n: int, last: HookEvent, what: Event, reason: str, wait: float) -> None:
        """A turn that ended on a rate limit or a transient API error: wait (as long as the gateway's
        retry-after says, else `wait`), then tell the worker to continue; each failed turn counts against
        `max_rate_limit_waits`."""
        step = decisions.retry(job, last, time.time(), self.spec.limits)
        if step in (Retry.WAIT, Retry.GIVE_UP):
            job.handled_event_ts = last.ts
            job.rate_waits += 1
        if step is Retry.GIVE_UP:
            self.review.fail(job, f"still failing ({reason}) after {job.rate_waits - 1} waits")
        elif step is Retry.WAIT:
            until = self.rate_limited_until(n)
            now = time.time()
            chosen, source = decisions.continue_wait(wait, until, last.ts, now)
            job.continue_at = now + chosen
            self.desk.save()
            self.desk.event(what, n, job=job.id, reason=reason, wait=chosen, wait_from=source)
        elif step is Retry.CONTINUE:
            job.continue_at = None
            self.desk.save()
            self.desk.tell(job, n, briefs.continue_text(job, reason), CONTINUE)

    def rate_limited_until(self, n: int) -> float | None:
        """Until when the upstream told worker n to wait, as the gateway saw it (its retry-after on a
        429/529 or 5xx); None without a gateway or a retry-after (a guess is not the upstream's word)."""
        usage = self.desk.gateway.usage()
        worker = usage.workers.get(n) if usage is not None else None
        if worker is None or worker.retry_after is None:
            return None
        return worker.rate_limited_until

    def note_permissions(self, job: Job, n: int) -> None:
        """Log each permission prompt of the job once: answered by the workers' hook from the policy,
        or (policy report) left on screen for a human, which the bus says."""
        for e in self.desk.events_of(n):
            if e.hook_event_name != "PermissionRequest" or e.ts <= max(job.permissions_seen, job.sent_at or 0.0):
                continue
            job.permissions_seen = e.ts
            self.desk.save()
            answered = PERMISSION_EVENTS.get(e.orch_decision or "")
            self.desk.event(answered or Event.PERMISSION_WAIT, n, job=job.id, tool=e.tool_name)
            if answered is None:
                tool = e.tool_name or "a tool"
                bus.post(self.run, None, briefs.permission_wait_text(self.run, n, tool))

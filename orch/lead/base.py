"""What the controller's parts share: the run, its spec and saved state, and the moves every part
makes (save the state, log an event, read a worker's state, send it a prompt on its job)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from orch.backends import registry as backends
from orch.errors import DeliveryError
from orch.fleet import launch, talk
from orch.fleet.tmux import PaneInfo
from orch.fleet.workerprocs import WorkerProcesses
from orch.fleet.workerstate import derive_state
from orch.gateway.link import GatewayLink
from orch.jobs.changes import ChecksRecord, Integration
from orch.jobs.findings import Reproduction
from orch.jobs.state import ControllerState, Job, save_state
from orch.lead import decisions
from orch.lead.changes import gate
from orch.lead.changes.checkpool import CheckPool
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent, HookEvent, WorkerState
from orch.settings.user import CHECKS_AT_ONCE
from orch.spec.model import FleetSpec, Role

PoolResult = ChecksRecord | Integration | Reproduction
"""What a piece of work in the check pool ends with: a gate's checks, an integration, a finding's reproduction."""


class Prompt(NamedTuple):
    """The events of one kind of prompt to a worker on its job."""

    sending: Event
    sent: Event
    failed: Event


REPOINT = Prompt(Event.REPOINT_SENDING, Event.REPOINT_SENT, Event.REPOINT_FAILED)
NUDGE = Prompt(Event.NUDGE_SENDING, Event.NUDGE_SENT, Event.NUDGE_FAILED)
CONTINUE = Prompt(Event.CONTINUE_SENDING, Event.CONTINUE_SENT, Event.CONTINUE_FAILED)
log = logging.getLogger(__name__)

CORRECTION = Prompt(Event.CORRECTION_SENDING, Event.CORRECTION_SENT, Event.CORRECTION_FAILED)


class Desk:
    def __init__(self, run: RunFolder, spec: FleetSpec, state: ControllerState) -> None:
        self.run = run
        self.spec = spec
        self.state = state
        self.info = run.info()
        self.workdir = Path(self.info.workdir)
        self.server = launch.server_for(self.info)
        self.confinement = backends.confinement_of(self.info)
        """How the workers are kept apart (the run's backend says): their panes, processes and relay."""
        self.tasks = dict(zip(spec.task_ids(), spec.tasks, strict=True))
        self.panes: dict[int, PaneInfo] = {}
        """The fleet's panes as of the loop's last step."""
        self.processes = WorkerProcesses(run, range(1, self.info.workers + 1), self.confinement)
        """The workers' processes, kept from one look to the next (the loop's thread only: the watchdog has
        its own): a look reads only what started since the last."""
        self.strays: dict[int, dict[int, str]] = {}
        """Each worker's stray processes (pid: command) found when its last job ended, before they were
        stopped (orch.lead.acceptance.Review.stop_leftovers): what a writer's gate holds against it."""
        self.gateway = GatewayLink(run)
        self._gateway_unanswered = False
        at_once = CHECKS_AT_ONCE.get()
        sandboxed = (spec.checks and spec.writer_tasks()) or any(t.role is Role.FINDER for t in spec.tasks)
        self.checks_host = gate.Host.of(self.info)
        """The run, as the checks' sandbox knows it (its tmux server; whether its workers share its uid)."""
        host = self.checks_host
        self.checks: CheckPool[PoolResult] = CheckPool(
            gate.slots(at_once, host) if sandboxed and gate.sandbox_available(host) is None else at_once, host
        )
        """The changes' checks and the findings' reproduce commands, off the loop (orch.lead.changes.writing and
        orch.lead.reproduce start them and take in what ended)."""

    def save(self) -> None:
        save_state(self.run, self.state)

    def event(self, name: Event, worker: int | None = None, **data: Any) -> None:
        self.run.log_event(ControllerEvent(event=name, worker=worker, data=data))

    def events_of(self, n: int) -> Sequence[HookEvent]:
        """Worker n's hook events of its current life (after its last restart; none of its previous life's late
        hooks: orch.lead.decisions.life_events)."""
        book = self.state.book(n)
        return decisions.life_events(self.run.hook_events(n), book.restarted_at, book.ended_session)

    def worker_state(self, n: int) -> tuple[WorkerState, str | None, HookEvent | None]:
        events = self.events_of(n)
        last = events[-1] if events else None
        state, detail = derive_state(last, self.panes.get(n))
        return state, detail, last

    def sync_gateway(self) -> None:
        """Send the gateway the budget and every worker's current job (at start, after a relaunch: a new
        gateway life knows neither until told; the budget also survives in model/budget.json)."""
        if self.gateway_said(self.gateway.set_budget(self.spec.budget), "the budget"):
            for book in self.state.workers:
                self.gateway_job(book.n, book.job)

    def gateway_job(self, n: int, job: str | None) -> None:
        """Tell the gateway worker n's job (it stamps usage and ledger lines with it); best effort."""
        self.gateway_said(self.gateway.set_job(n, job), f"worker {n}'s job")

    def gateway_said(self, error: str | None, what: str) -> bool:
        """False (warned once per controller) when the gateway did not take a control call."""
        if error is None:
            return True
        if not self._gateway_unanswered:
            self._gateway_unanswered = True
            log.warning("run %s: the model gateway did not take %s: %s", self.run.name, what, error)
            self.event(Event.GATEWAY_UNANSWERED, what=what, error=error)
        return False

    def alive(self) -> list[int]:
        return decisions.alive(self.state)

    def tell(self, job: Job, n: int, text: str, prompt: Prompt) -> bool:
        """Send worker n a prompt on its job; False (logged) when it did not arrive."""
        self.event(prompt.sending, n, job=job.id)
        try:
            talk.send(self.run, n, text)
        except DeliveryError as exc:
            self.event(prompt.failed, n, job=job.id, error=exc.one_line())
            return False
        job.last_prompt_at = time.time()
        self.save()
        self.event(prompt.sent, n, job=job.id)
        return True


class Part:
    """One concern of the controller (dispatch, review, recovery), working at the shared desk."""

    def __init__(self, desk: Desk) -> None:
        self.desk = desk
        self.run = desk.run
        self.spec = desk.spec
        self.state = desk.state

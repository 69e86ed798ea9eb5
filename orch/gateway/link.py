"""The lead's side of the run's model gateway: what it reads from the run folder's `model/` (usage and
cost, the gateway's own events, the ledger of tool calls) and the two control calls it makes (the
budget, each worker's current job). The gateway is the only writer of `model/` (orch.gateway.modeldir).

A run without a gateway (started before there was one) has no `model/`: its readers answer None or
nothing, and the control calls answer False.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from orch.errors import NotFoundError, OrchError
from orch.gateway.modeldir import GatewayBudget, GatewayEvent, GatewayEventKind, LedgerEntry, UsageSnapshot, read_usage
from orch.gateway.process import GatewayClient, GatewayHandle, handle_path, load_handle
from orch.run.files import JsonlTail
from orch.run.folder import RunFolder
from orch.spec.model import Budget

log = logging.getLogger(__name__)


def has_gateway(run: RunFolder) -> bool:
    """The run has (or had) a model gateway: it keeps `model/`."""
    return run.model_dir.is_dir()


def gateway_budget(budget: Budget) -> GatewayBudget:
    """The spec's caps, as the gateway takes them (the same four fields)."""
    return GatewayBudget.model_validate(budget.model_dump())


def control(run_name: str) -> GatewayClient:
    """The run's gateway control client; NotFoundError when no gateway was started for the run."""
    handle = _handle(run_name)
    if handle is None:
        raise NotFoundError(f"run {run_name!r} has no gateway handle", hint="is the run's gateway started?")
    return GatewayClient(handle)


def _handle(run_name: str) -> GatewayHandle | None:
    # load_handle raises NotFoundError for a missing handle here, and answers None on the integration
    # branch: either way, None.
    try:
        return load_handle(handle_path(run_name))
    except NotFoundError:
        return None


class GatewayLink:
    """One controller's view of its run's gateway: incremental readers and best-effort control calls."""

    def __init__(self, run: RunFolder) -> None:
        self.run = run
        self._events = JsonlTail(run.model_log, GatewayEvent)
        self._ledger = JsonlTail(run.model_ledger, LedgerEntry)

    def usage(self) -> UsageSnapshot | None:
        return read_usage(self.run)

    def events(self) -> Sequence[GatewayEvent]:
        return self._events.records()

    def ledger(self) -> Sequence[LedgerEntry]:
        """Every ledger line so far, the last answer's included (the gateway writes it just after the
        answer: it is asked to settle first)."""
        self.settle()
        return self._ledger.records()

    def settle(self) -> None:
        """Wait until the gateway has written everything answered so far (usage.json, the ledger, the
        recording); best effort: a gateway that is gone has written all it will."""
        self._call(lambda c: c.settle())

    def refusals(self) -> dict[int | None, str]:
        """Why the gateway refuses whom (worker, or None: the whole fleet), from usage.json and the
        budget-exceeded lines of gateway.jsonl (whichever the controller sees first)."""
        out: dict[int | None, str] = {}
        for event in self.events():
            if event.event is GatewayEventKind.BUDGET_EXCEEDED:
                # A fleet refusal names the worker whose request met it: the scope says whom it stops.
                whom = None if event.worker is None or event.data.get("scope") == "fleet" else event.worker
                out.setdefault(whom, _reason(event))
        usage = self.usage()
        if usage is not None:
            if usage.refused:
                out.setdefault(None, usage.refused)
            for n, worker in usage.workers.items():
                if worker.refused:
                    out.setdefault(n, worker.refused)
        return out

    def set_budget(self, budget: Budget) -> str | None:
        """Send the caps; None when the gateway took them (or the run has none), else why not."""
        return self._call(lambda c: c.set_budget(gateway_budget(budget)))

    def set_job(self, n: int, job: str | None) -> str | None:
        """Tell the gateway which job worker n is on (None: none), so it stamps usage and the ledger."""
        return self._call(lambda c: c.set_job(n, job))

    def _call(self, call: Callable[[GatewayClient], None]) -> str | None:
        if not has_gateway(self.run):  # a run from before the gateway: nobody to tell
            return None
        try:
            call(control(self.run.name))
        except OrchError as exc:  # no handle, or the gateway did not answer (the client says which)
            return exc.one_line()
        return None


def _reason(event: GatewayEvent) -> str:
    for key in ("reason", "message", "detail"):
        value = event.data.get(key)
        if isinstance(value, str) and value:
            return value
    return "budget exceeded"

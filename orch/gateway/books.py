"""The gateway's books: usage and cost per worker, model and job (model/usage.json), and the budget.

A request's usage is counted once, when its exchange completed (the full JSON body, or the stream's
message_stop). A stream cut short, by the upstream, the worker leaving or the gateway dying, is not
counted: the API bills what it generated, so the books can only fall short, never count twice. The
snapshot is rewritten atomically after every change and loaded back at start, so a restarted server
child continues the totals.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TypeVar

from pydantic import ValidationError

from orch.gateway.eventlog import EventLog
from orch.gateway.modeldir import GatewayBudget, GatewayEventKind, Tokens, UsageLine, UsageSnapshot, WorkerUsage
from orch.gateway.pricing import Pricing
from orch.run.files import atomic_write
from orch.run.folder import RunFolder

NO_JOB = "-"
M = TypeVar("M", UsageSnapshot, GatewayBudget)


def _add(line: UsageLine, tokens: Tokens, cost: float) -> None:
    line.input_tokens += tokens.input_tokens
    line.output_tokens += tokens.output_tokens
    line.cache_creation_input_tokens += tokens.cache_creation_input_tokens
    line.cache_read_input_tokens += tokens.cache_read_input_tokens
    line.requests += 1
    line.cost_usd += cost


def _load(path: Path, model: type[M]) -> M | None:
    try:
        return model.model_validate_json(path.read_text())
    except (OSError, ValidationError):
        return None  # absent, or torn by hand: start afresh rather than refuse to serve


class Books:
    def __init__(self, folder: RunFolder, pricing: Pricing, events: EventLog, offline: bool, replay: bool) -> None:
        self.folder, self.pricing, self.events = folder, pricing, events
        self.usage = _load(folder.model_usage, UsageSnapshot) or UsageSnapshot(
            offline=offline, billed=not (offline or replay), pricing=pricing.origin, updated=time.time()
        )
        self.usage.offline, self.usage.billed, self.usage.pricing = offline, not (offline or replay), pricing.origin
        self.budget = _load(folder.model_budget, GatewayBudget) or GatewayBudget()
        self._unpriced: set[str] = set()
        self._lock = asyncio.Lock()
        self._dirty = False

    def worker(self, n: int) -> WorkerUsage:
        return self.usage.workers.setdefault(n, WorkerUsage())

    # --- counting -------------------------------------------------------------------------------
    def count(self, worker: int, job: str | None, model: str, tokens: Tokens) -> float:
        cost = self.pricing.cost(model, tokens)
        if cost is None:
            cost = 0.0
            if model not in self._unpriced:
                self._unpriced.add(model)
                self.events.emit(GatewayEventKind.NO_PRICE, worker, note=f"no price for model {model}")
        usage = self.worker(worker)
        for line in (
            usage,
            usage.by_model.setdefault(model, UsageLine()),
            usage.by_job.setdefault(job or NO_JOB, UsageLine()),
            self.usage.total,
        ):
            _add(line, tokens, cost)
        self._dirty = True
        return cost

    def rate_limited(self, worker: int, until: float, retry_after: float | None) -> None:
        usage = self.worker(worker)
        usage.rate_limited_until, usage.retry_after = until, retry_after
        self._dirty = True

    # --- the budget -----------------------------------------------------------------------------
    def set_budget(self, budget: GatewayBudget) -> None:
        self.budget = budget
        self._dirty = True

    def _fleet_reason(self) -> str | None:
        b, total = self.budget, self.usage.total
        if b.max_cost_usd is not None and total.cost_usd >= b.max_cost_usd:
            return f"the fleet spent ${total.cost_usd:.4f} of its ${b.max_cost_usd:.4f} cap"
        if b.max_tokens is not None and total.total >= b.max_tokens:
            return f"the fleet used {total.total} tokens of its {b.max_tokens} cap"
        return None

    def _worker_reason(self, n: int) -> str | None:
        b, usage = self.budget, self.worker(n)
        if b.max_cost_per_worker_usd is not None and usage.cost_usd >= b.max_cost_per_worker_usd:
            return f"worker {n} spent ${usage.cost_usd:.4f} of its ${b.max_cost_per_worker_usd:.4f} cap"
        if b.max_tokens_per_worker is not None and usage.total >= b.max_tokens_per_worker:
            return f"worker {n} used {usage.total} tokens of its {b.max_tokens_per_worker} cap"
        return None

    def refusal(self, n: int) -> str | None:
        """Why worker n's next request is refused (None: serve it). Emits BUDGET_EXCEEDED when a refusal
        starts; usage.json keeps `refused`, so a restarted child does not announce it again."""
        fleet, mine = self._fleet_reason(), self._worker_reason(n)
        usage = self.worker(n)
        if fleet != self.usage.refused:
            if fleet is not None and self.usage.refused is None:
                self.events.emit(GatewayEventKind.BUDGET_EXCEEDED, n, scope="fleet", reason=fleet)
            self.usage.refused = fleet
            self._dirty = True
        if mine != usage.refused:
            if mine is not None and usage.refused is None:
                self.events.emit(GatewayEventKind.BUDGET_EXCEEDED, n, scope="worker", reason=mine)
            usage.refused = mine
            self._dirty = True
        return fleet or mine

    # --- the file -------------------------------------------------------------------------------
    @property
    def dirty(self) -> bool:
        """Changed since usage.json was last written."""
        return self._dirty

    async def flush(self) -> None:
        """Write usage.json if anything changed; one writer at a time, each with the latest state."""
        async with self._lock:
            if not self._dirty:
                return
            self._dirty = False
            self.usage.updated = time.time()
            data = self.usage.model_dump_json(indent=2) + "\n"
            await asyncio.to_thread(atomic_write, self.folder.model_usage, data)

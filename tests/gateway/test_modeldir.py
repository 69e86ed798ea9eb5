"""orch.gateway.modeldir: a run's cost as `orch status` and `orch watch` show it, and why nothing was billed."""

from __future__ import annotations

import pytest

from orch.gateway.modeldir import NO_TRAFFIC, UsageLine, UsageSnapshot, run_cost, unbilled

pytestmark = pytest.mark.pure


def usage(cost: float, billed: bool) -> UsageSnapshot:
    return UsageSnapshot(
        offline=not billed, billed=billed, pricing="shipped", updated=1.0, total=UsageLine(cost_usd=cost)
    )


@pytest.mark.parametrize(
    ("books", "workers", "offline", "shown"),
    [
        (None, [None, None], True, (0.0, NO_TRAFFIC)),  # an offline `orch up` before any traffic: $0, and why
        (None, [None], False, (0.0, NO_TRAFFIC)),  # a live one too: nothing went through its gateway
        (usage(0.5, billed=False), [None], True, (0.5, "offline: orch's scripted model answered")),
        (usage(0.5, billed=True), [None], False, (0.5, None)),  # billed: nothing to say beside it
        (None, [0.25, None, 0.5], False, (0.75, None)),  # no gateway books: what the status lines counted
    ],
    ids=["offline-no-traffic", "live-no-traffic", "offline", "billed", "status-lines"],
)
def test_a_runs_cost_and_why_nothing_was_billed(
    books: UsageSnapshot | None, workers: list[float | None], offline: bool, shown: tuple[float, str | None]
) -> None:
    assert run_cost(books, workers, offline, replayed=False) == shown


def test_a_replayed_run_billed_nothing() -> None:
    assert unbilled(False, offline=False, replayed=True) == "replayed a recording"
    assert unbilled(None, offline=False, replayed=False) is None, "a live run may have been billed"

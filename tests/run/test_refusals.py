"""orch/run/refusals.py: refused connections logged at once, then at most once an interval per kind, each
event counting the refusals it stands for."""

from __future__ import annotations

import pytest

from orch.run import refusals
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.refusals import RefusalLog
from tests.helpers import run_events

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network


def _logged(run: RunFolder) -> list[tuple[int | None, object, object]]:
    events = run_events(run, Event.CONNECTIONS_CAPPED)
    return [(e["worker"], e["data"]["socket"], e["data"]["refused"]) for e in events]


def test_a_flood_of_refusals_is_one_event_until_the_interval_passes(
    run: RunFolder, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = RefusalLog(run)
    for _ in range(50):
        log.refuse(("uid", 1001), Event.CONNECTIONS_CAPPED, 1, {"socket": "bus.sock"})
    log.refuse(("uid", 1002), Event.CONNECTIONS_CAPPED, 2, {"socket": "bus.sock"})  # another kind: its own first
    assert _logged(run) == [(1, "bus.sock", 1), (2, "bus.sock", 1)]
    monkeypatch.setattr(refusals, "INTERVAL", 0.0)  # the interval passed
    log.refuse(("uid", 1001), Event.CONNECTIONS_CAPPED, 1, {"socket": "bus.sock"})
    assert _logged(run)[-1] == (1, "bus.sock", 50)  # the 49 held back and this one

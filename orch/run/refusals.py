"""Refused connections as controller events, rate-limited: the first of a kind at once, then at most one per
INTERVAL, each with `refused`, how many refusals it stands for. A worker opening and closing bursts of
connections past its cap, again and again, cannot flood events.jsonl (the bus server, the relay)."""

from __future__ import annotations

import time
from collections.abc import Hashable

from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent

INTERVAL = 60.0  # seconds between two events of one kind on one socket


class RefusalLog:
    def __init__(self, run: RunFolder) -> None:
        self.run = run
        self._logged: dict[Hashable, float] = {}  # when each kind was last logged
        self._unlogged: dict[Hashable, int] = {}  # refusals of each kind since

    def refuse(self, key: Hashable, event: Event, worker: int | None, data: dict[str, object]) -> None:
        """One refusal of kind `key` (its event, socket and peer, as the caller tells them apart)."""
        count = self._unlogged.get(key, 0) + 1
        last, now = self._logged.get(key), time.monotonic()
        if last is not None and now - last < INTERVAL:
            self._unlogged[key] = count
            return
        self._logged[key], self._unlogged[key] = now, 0
        self.run.log_event(ControllerEvent(event=event, worker=worker, data={**data, "refused": count}))

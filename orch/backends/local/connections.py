"""A cap on one worker's open connections to one of its relay sockets (orch.backends.local.relay).

Every worker's bus, gateway, hooks, egress and pane sockets share the relay's file descriptors: no worker may
spend them. Past its cap a connection is refused at once (connections-capped), each refusal logged through
orch.run.refusals (rate-limited: a burst is one event a minute)."""

from __future__ import annotations

from pathlib import Path

from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.refusals import RefusalLog


class ConnectionCap:
    """Worker n's open connections on the socket at `path`, at most `limit`."""

    def __init__(self, run: RunFolder, n: int, path: Path, limit: int) -> None:
        self.run, self.n, self.path, self.limit = run, n, path, limit
        self.open = 0
        self._refusals = RefusalLog(run)

    def admit(self) -> bool:
        if self.open >= self.limit:
            self.refuse(Event.CONNECTIONS_CAPPED, self.n, {"open": self.limit})
            return False
        self.open += 1
        return True

    def release(self) -> None:
        self.open -= 1

    def refuse(self, event: Event, worker: int | None, data: dict[str, object]) -> None:
        self._refusals.refuse(event, event, worker, {**data, "socket": self.path.name})

"""The incremental readers a Watcher (orch.view.snapshot) keeps of one run folder: bus.md's tail, a file
re-read only when it moved, a worker's state from its hook log alone (orch.escape.terminal makes any text a worker
wrote safe to show)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from pathlib import Path

from orch import escape
from orch.fleet.workerstate import ALIVE, derive_state, final_state
from orch.run import bus
from orch.run.records import HookEvent, Strict, WorkerState

KEEP_LINES = 200  # commentary and bus lines a snapshot carries
TEXT_CHARS = 160  # a bus or commentary line, shortened: a worker's line must not flood a tile


class BusEntry(Strict):
    ts: float | None
    sender: str
    text: str


def worker_state(events: Sequence[HookEvent], running: bool) -> tuple[WorkerState, str | None, float | None]:
    """The state from the hook log alone, and since when (the first of the newest events that agree). Once the
    run is over, the worker's final state: how its agent ended, or what it was doing when the run ended (no
    clock: nothing runs on)."""
    if not running:
        return (*final_state(events[-1] if events else None), None)
    state, detail = derive_state(events[-1] if events else None, ALIVE)
    since = None
    for event in reversed(events):  # a busy worker's log is long: walk back only as far as the state holds
        if derive_state(event, ALIVE)[0] is not state:
            break
        since = event.ts
    return state, detail, since


class Changed:
    """A file re-read only when its size or mtime moved."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stamp: tuple[int, int] | None = None

    def moved(self) -> bool:
        try:
            st = self.path.stat()
            stamp: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        if stamp == self.stamp:
            return False
        self.stamp = stamp
        return True


class BusTail:
    """bus.md read incrementally: the last KEEP_LINES lines, and each sender's newest."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.pending = path, 0, b""
        self.lines: deque[BusEntry] = deque(maxlen=KEEP_LINES)
        self.last: dict[str, str] = {}
        self._cleaned: dict[str, tuple[str, str]] = {}

    def last_clean(self, sender: str) -> str | None:
        """The sender's newest line, made safe to show (cleaned once per line, not per snapshot)."""
        raw = self.last.get(sender)
        if raw is None:
            return None
        if self._cleaned.get(sender, ("", ""))[0] != raw:
            self._cleaned[sender] = (raw, escape.terminal(raw, TEXT_CHARS))
        return self._cleaned[sender][1]

    def read(self) -> None:
        try:
            size = self.path.stat().st_size
        except OSError:
            return
        if size < self.offset:
            self.offset, self.pending = 0, b""
            self.lines.clear()
            self.last.clear()
        if size == self.offset:
            return
        with self.path.open("rb") as fh:
            fh.seek(self.offset)
            chunk = self.pending + fh.read(size - self.offset)
        self.offset = size
        *complete, self.pending = chunk.split(b"\n")
        for raw in complete:
            text = raw.decode("utf-8", errors="replace")
            parsed = bus.parse_line(text)
            if parsed is not None:
                entry = BusEntry(
                    ts=parsed.ts.timestamp(), sender=parsed.sender, text=escape.terminal(parsed.text, TEXT_CHARS)
                )
                self.last[parsed.sender] = text
            elif text.startswith("[") and "]" in text:  # a line appended by hand: `[W3] text`
                sender, _, rest = text[1:].partition("]")
                entry = BusEntry(ts=None, sender=escape.terminal(sender, 12), text=escape.terminal(rest, TEXT_CHARS))
                self.last[sender] = text
            else:
                continue
            self.lines.append(entry)

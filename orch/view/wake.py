"""Waking the view when the run folder changes (inotify), with a timer as the backstop."""

from __future__ import annotations

import threading

from orch.run.folder import RunFolder
from orch.waits import IN_CLOSE_WRITE, IN_CREATE, IN_MODIFY, IN_MOVED_TO, Inotify

BACKSTOP = 1.0  # seconds: time in state and time left move without any file changing
MASK = IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE


class Wakeup:
    """Blocks until something under the run folder changed (its root, state/, model/, the outboxes)."""

    def __init__(self, run: RunFolder) -> None:
        self._stop = threading.Event()
        try:
            self._notify: Inotify | None = Inotify()
        except OSError:
            self._notify = None
        if self._notify is not None:
            dirs = [run.root, run.state_dir, run.model_dir]
            dirs += sorted(run.outbox_dir.glob("agent-*")) if run.outbox_dir.is_dir() else []
            for folder in dirs:
                try:
                    self._notify.add_watch(folder, MASK)
                except OSError:  # model/ appears with the gateway; a folder gone: the backstop covers it
                    continue

    def wait(self, timeout: float = BACKSTOP) -> bool:
        """True when something changed, False after `timeout` (or once stopped)."""
        if self._stop.is_set():
            return False
        if self._notify is None:
            return self._stop.wait(timeout)
        return self._notify.wait(timeout)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def pause(self, seconds: float) -> None:
        """Let changes gather for `seconds` (they are drained by the next `wait`); returns early once stopped."""
        if seconds > 0:
            self._stop.wait(seconds)

    def stop(self) -> None:
        """Make `wait` return within its timeout (from any thread)."""
        self._stop.set()

    def close(self) -> None:
        """Release inotify: from the thread that waits, or once it has gone."""
        self._stop.set()
        if self._notify is not None:
            self._notify.close()
            self._notify = None

"""Waking the view when the run folder changes (inotify), with a timer as the backstop."""

from __future__ import annotations

import contextlib
import os
import select
import threading

from orch.run.folder import RunFolder
from orch.waits import IN_CLOSE_WRITE, IN_CREATE, IN_MODIFY, IN_MOVED_TO, Inotify

BACKSTOP = 1.0  # seconds: time in state and time left move without any file changing
MASK = IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE


class Wakeup:
    """Blocks until something under the run folder changed (its root, state/, model/, the outboxes)."""

    def __init__(self, run: RunFolder) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()  # `stop` (any thread) never writes to a pipe `close` has closed
        self._woken_r, self._woken_w = os.pipe()  # `stop` writes a byte: a `wait` under way returns at once
        self._closed = False
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
        ready, _, _ = select.select([self._notify.fd, self._woken_r], [], [], timeout)
        if not ready or self._woken_r in ready:
            return False
        return self._notify.wait(0)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def pause(self, seconds: float) -> None:
        """Let changes gather for `seconds` (they are drained by the next `wait`); returns early once stopped."""
        if seconds > 0:
            self._stop.wait(seconds)

    def stop(self) -> None:
        """Make `wait` return at once, and every later one (from any thread)."""
        self._stop.set()
        with self._lock:
            if not self._closed:
                with contextlib.suppress(OSError):
                    os.write(self._woken_w, b"x")

    def close(self) -> None:
        """Release inotify: from the thread that waits, or once it has gone."""
        self._stop.set()
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self._woken_r)
                os.close(self._woken_w)
        if self._notify is not None:
            self._notify.close()
            self._notify = None

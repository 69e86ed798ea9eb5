"""Stopping running checks from another thread (the controller's check pool closing): each check's process group
is killed (its sandbox, and with it every process the check started) and no further check starts."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator


class ChecksStopped(Exception):
    """The checks were stopped (the run ended, or its controller is closing): no result."""


class Stopper:
    """What stops running checks from another thread: it kills each check's process group (its sandbox, and
    with it every process the check started) and keeps further checks from starting."""

    def __init__(self, on_stop: Callable[[], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen[bytes]] = set()
        self._on_stop = on_stop
        """What else a stop does: in a container, kill the checks' uid (orch.lead.changes.gate.stop_uid_checks)."""
        self.stopped = False

    @contextlib.contextmanager
    def track(self, proc: subprocess.Popen[bytes]) -> Iterator[None]:
        with self._lock:
            self._procs.add(proc)
            stopped = self.stopped
        if stopped:
            _kill_group(proc)
        try:
            yield
        finally:
            with self._lock:
                self._procs.discard(proc)

    def stop(self) -> None:
        with self._lock:
            self.stopped = True
            procs = list(self._procs)
        for proc in procs:
            _kill_group(proc)
        if self._on_stop is not None:
            self._on_stop()

    def check(self) -> None:
        if self.stopped:
            raise ChecksStopped


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)

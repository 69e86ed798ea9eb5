"""The controller's check pool: the changes' checks (a gate's, an integration's) run off the controller's loop,
at most `slots` at once, each on a thread of its own that only waits on its sandboxed processes.

The loop starts work here and picks up what ended (`take`), woken through `fd` (a pipe a finished check
writes a byte to); the work itself returns a value and writes only its own files (checks.json, the queue's
log, the branch's compare-and-swap): every decision and every save of the controller's books stays on the
loop. `close` stops it all: the running checks' sandboxes are killed (orch.lead.changes.gate.Stopper) and
nothing ends afterwards. A controller killed outright takes its checks with it (bubblewrap's
--die-with-parent; in a container, a resumed controller kills what its checks' uid left first:
orch.lead.changes.gate.stop_leftover_checks); its books still say the change is being checked, so a resumed
controller runs it again.
"""

from __future__ import annotations

import contextlib
import os
import threading
import traceback
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Generic, TypeVar

from orch.lead.changes.gate import NO_RUN, Host, stop_uid_checks
from orch.lead.changes.stopper import ChecksStopped, Stopper

T = TypeVar("T")

JOIN_SECONDS = 10.0
"""How long `close` waits for a stopped check's thread (its sandbox is killed first: it ends at once)."""


@dataclass(frozen=True)
class Ended(Generic[T]):
    """One piece of work that ended: its value, or what went wrong (an error is the change's, never the loop's)."""

    change: str
    work: str
    """What it was (orch.lead.changes.decisions.Work)."""
    value: T | None
    error: str | None = None


class CheckPool(Generic[T]):
    def __init__(self, slots: int, host: Host = NO_RUN) -> None:
        self.slots = max(1, slots)
        self._started = False  # a pool that never ran a check has none to kill (and need not probe for them)
        self._stopper = Stopper(lambda: stop_uid_checks(host) if self._started else None)
        self._lock = threading.Lock()
        self._running: dict[str, tuple[str, threading.Thread]] = {}
        self._ended: list[Ended[T]] = []
        self._pipe: tuple[int, int] | None = None

    @property
    def fd(self) -> int:
        """Readable when something ended (the loop waits on it beside its inotify)."""
        if self._pipe is None:
            read, write = os.pipe()
            os.set_blocking(read, False)
            os.set_blocking(write, False)
            self._pipe = (read, write)
        return self._pipe[0]

    def running(self) -> dict[str, str]:
        with self._lock:
            return {change: work for change, (work, _) in self._running.items()}

    def free(self) -> int:
        with self._lock:
            return self.slots - len(self._running)

    def start(self, change: str, work: str, job: Callable[[Stopper], T]) -> bool:
        """Run `job(stopper)` on a thread of its own (its result comes back through `take`); False, and nothing
        started, when every slot is taken, the change is already running or the pool is closed."""
        self.fd  # noqa: B018 (the pipe exists before any thread may write to it)
        thread = threading.Thread(target=self._run, args=(change, work, job), name=f"orch-check-{change}", daemon=True)
        with self._lock:
            if self._stopper.stopped or change in self._running or len(self._running) >= self.slots:
                return False
            self._running[change] = (work, thread)
            self._started = True
        thread.start()
        return True

    def _run(self, change: str, work: str, job: Callable[[Stopper], T]) -> None:
        ended: Ended[T] | None
        try:
            ended = Ended(change, work, job(self._stopper))
        except ChecksStopped:
            ended = None
        except Exception as exc:  # the change fails with it; the loop carries on
            detail = "".join(traceback.format_exception_only(exc)).strip()
            ended = Ended(change, work, None, error=detail)
        with self._lock:  # one step: the loop never sees it neither running nor ended (it would start it again)
            self._running.pop(change, None)
            if ended is None or self._stopper.stopped:
                return
            self._ended.append(ended)
        if self._pipe is not None:
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(self._pipe[1], b".")

    def take(self, works: Collection[str] | None = None) -> list[Ended[T]]:
        """What ended since the last call, in the order it ended: of these kinds of `work` (default: every kind;
        the rest stay for their taker)."""
        if self._pipe is not None:
            with contextlib.suppress(BlockingIOError, OSError):
                while os.read(self._pipe[0], 4096):
                    pass
        with self._lock:
            out = [e for e in self._ended if works is None or e.work in works]
            self._ended = [e for e in self._ended if works is not None and e.work not in works]
        return out

    def close(self) -> None:
        """Stop every running check (its processes killed) and wait for their threads; nothing ends afterwards."""
        self._stopper.stop()
        with self._lock:
            threads = [thread for _, thread in self._running.values()]
        for thread in threads:
            thread.join(JOIN_SECONDS)
        if self._pipe is not None:
            for fd in self._pipe:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._pipe = None

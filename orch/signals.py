"""Signals held off while a teardown runs whole (`held`), and a process stopped for sure (`terminate`).

A run's end tears its fleet down (tmux, gateway, relay) after it told a person the run ended, and that person
may close the terminal at once (SIGHUP), or a supervisor send SIGTERM. Killed in the middle, the teardown left
what it had not stopped yet running; held, the signal is acted on once the teardown is over, as it would have
been before. Ctrl-C is not held by default: it is the person at the keyboard asking to stop now, and `orch run`
then says how to finish the teardown."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType

from orch import procs
from orch.errors import WaitTimeoutError
from orch.waits import wait_until

HELD = (signal.SIGHUP, signal.SIGTERM)
"""A closed terminal, a supervisor's stop."""


@contextlib.contextmanager
def held(signals: tuple[signal.Signals, ...] = HELD) -> Iterator[None]:
    """Run the block whole: each of `signals` that comes meanwhile is kept, then raised again once the block is
    over, under the handler it had before (the default's: the process ends by that signal; Python's SIGINT: a
    KeyboardInterrupt). Held blocks nest (the inner one hands what came to the outer). Only the main thread
    can set handlers: on another, the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []

    def keep(number: int, _frame: FrameType | None) -> None:
        came.append(number)

    before = {sig: signal.signal(sig, keep) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        for number in dict.fromkeys(came):
            signal.raise_signal(number)


def terminate(pid: int, timeout: float, what: str) -> None:
    """SIGTERM `pid`, then SIGKILL if it has not exited within `timeout` seconds; return once it has (a zombie has:
    it only waits for its parent) or its pid is another process's; WaitTimeoutError if even SIGKILL did not end it
    (a process in uninterruptible sleep). `what` names it in that error. Whether it still serves (a pid file, a
    socket) is no answer: a process may let those go well before it exits (its threads joined, a child waited)."""
    born = procs.started(pid)

    def gone() -> bool:
        return not procs.alive(pid) or procs.started(pid) != born

    for sig in (signal.SIGTERM, signal.SIGKILL):
        if gone():
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        try:
            wait_until(gone, timeout, f"{what} (pid {pid}) to exit")
            return
        except WaitTimeoutError:
            if sig is signal.SIGKILL:
                raise

"""Signals held off while a teardown runs whole (`held`): a run's end tears its fleet down (tmux, gateway,
relay) after it told a person the run ended, and that person may close the terminal at once (SIGHUP), or a
supervisor send SIGTERM. Killed in the middle, the teardown left what it had not stopped yet running; held, the
signal is acted on once the teardown is over, as it would have been before. Ctrl-C is not held by default: it
is the person at the keyboard asking to stop now, and `orch run` then says how to finish the teardown."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

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

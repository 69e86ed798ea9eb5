"""Waits are objects with a deadline and a reason, never fixed sleeps.

File waits use inotify (Linux, through inotify_simple) so a done flag is noticed as soon as it is written;
where inotify is not available they fall back to polling with a short interval and the same deadline.
"""

from __future__ import annotations

import math
import os
import select
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

from inotify_simple import INotify, flags

from orch.errors import WaitTimeoutError

T = TypeVar("T")

IN_MODIFY = int(flags.MODIFY)
IN_ATTRIB = int(flags.ATTRIB)
IN_CLOSE_WRITE = int(flags.CLOSE_WRITE)
IN_MOVED_TO = int(flags.MOVED_TO)
IN_CREATE = int(flags.CREATE)
POLL_INTERVAL = 0.05


class Inotify:
    """inotify (inotify_simple): add watches, then block until something happens. OSError where the
    kernel has none."""

    def __init__(self) -> None:
        self._inotify = INotify(nonblocking=True)

    @property
    def fd(self) -> int:
        return int(self._inotify.fileno())

    def add_watch(self, path: Path, mask: int) -> None:
        self._inotify.add_watch(path, mask)

    def wait(self, timeout: float | None) -> bool:
        """Block until at least one event (True) or the timeout (False); drains what is queued."""
        ms = None if timeout is None else max(0, math.ceil(timeout * 1000))
        return bool(self._inotify.read(timeout=ms))

    def close(self) -> None:
        self._inotify.close()

    def __enter__(self) -> Inotify:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _inotify_or_none() -> Inotify | None:
    try:
        return Inotify()
    except OSError:
        return None


def wait_for_paths(paths: Iterable[Path], timeout: float | None) -> list[Path]:
    """Wait until every path exists; return the ones still missing when the timeout ran out."""
    wanted = list(paths)
    deadline = None if timeout is None else time.monotonic() + timeout
    notifier = _inotify_or_none()
    try:
        if notifier is not None:
            for parent in {p.parent for p in wanted}:
                notifier.add_watch(parent, IN_CREATE | IN_MOVED_TO | IN_ATTRIB | IN_CLOSE_WRITE)
        while True:
            missing = [p for p in wanted if not p.exists()]
            if not missing:
                return []
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return missing
            if notifier is not None:
                notifier.wait(remaining)
            else:
                time.sleep(POLL_INTERVAL if remaining is None else min(POLL_INTERVAL, remaining))
    finally:
        if notifier is not None:
            notifier.close()


def watch_file(path: Path, timeout: float | None = None) -> Iterator[None]:
    """Yield once now and again after each change to `path`; stops after `timeout` seconds if given."""
    deadline = None if timeout is None else time.monotonic() + timeout
    notifier = _inotify_or_none()
    try:
        if notifier is not None:
            notifier.add_watch(path, IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB)
        yield
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return
            if notifier is not None:
                if notifier.wait(remaining):
                    yield
            else:
                time.sleep(POLL_INTERVAL)
                yield
    finally:
        if notifier is not None:
            notifier.close()


def read_line(fd: int, timeout: float, reason: str) -> bytes:
    """The next line from a pipe (and whatever came with it), waiting at most `timeout` seconds (WaitTimeoutError
    naming `reason`): a process's word that it is ready. b"" (or what came before) once every writer closed the
    pipe: the process holding it ended without saying it."""
    deadline = time.monotonic() + timeout
    line = b""
    while b"\n" not in line:
        if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            raise WaitTimeoutError(f"timed out after {timeout:g}s waiting for {reason}")
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        line += chunk
    return line


def wait_until(
    predicate: Callable[[], T | None],
    timeout: float,
    reason: str,
    interval: float = POLL_INTERVAL,
    watch: Path | None = None,
) -> T:
    """Poll `predicate` until it returns something truthy; raise WaitTimeoutError naming `reason`.

    With `watch` (a folder), re-check whenever a file in it changes instead of on a timer; a
    one-second timer stays as a backstop for conditions that do not touch the folder.
    """
    deadline = time.monotonic() + timeout
    notifier = _inotify_or_none() if watch is not None else None
    try:
        if notifier is not None and watch is not None:
            notifier.add_watch(watch, IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE)
        while True:
            value = predicate()
            if value:
                return value
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeoutError(f"timed out after {timeout:g}s waiting for {reason}")
            if notifier is not None:
                notifier.wait(min(remaining, 1.0))
            else:
                time.sleep(min(interval, remaining))
    finally:
        if notifier is not None:
            notifier.close()

"""Waits are objects with a deadline and a reason, never fixed sleeps.

File waits use inotify (Linux) so a done flag is noticed as soon as it is written; where inotify is
not available they fall back to polling with a short interval and the same deadline.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import select
import struct
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

from orch.errors import WaitTimeoutError

T = TypeVar("T")

IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
_EVENT = struct.Struct("iIII")
POLL_INTERVAL = 0.05


class Inotify:
    """A minimal inotify wrapper (ctypes): add watches, then block until something happens."""

    def __init__(self) -> None:
        libc_name = ctypes.util.find_library("c")
        if libc_name is None:
            raise OSError(errno.ENOSYS, "libc not found")
        self._libc = ctypes.CDLL(libc_name, use_errno=True)
        if not hasattr(self._libc, "inotify_init1"):
            raise OSError(errno.ENOSYS, "inotify is not available")
        fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.fd: int = fd

    def add_watch(self, path: Path, mask: int) -> None:
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_add_watch {path}: {os.strerror(err)}")

    def wait(self, timeout: float | None) -> bool:
        """Block until at least one event (True) or the timeout (False); drains what is queued."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return False
        try:
            while os.read(self.fd, 65536):
                pass
        except BlockingIOError:
            pass
        return True

    def close(self) -> None:
        os.close(self.fd)

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

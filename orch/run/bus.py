"""The append-only bus: `bus.md`, one message per line, `<UTC timestamp> [W3] text`.

Posts take an exclusive flock and append with one write(2), so concurrent writers never lose a line,
never interleave two, and each writer's lines keep their order.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import os
import re
from collections.abc import Iterator
from typing import TextIO

from orch.errors import UsageError
from orch.run.folder import RunFolder, decode_text
from orch.run.records import BusLine
from orch.waits import watch_file

LINE_RE = re.compile(r"^(?P<ts>\S+Z) \[(?P<sender>[^\]]+)\] (?P<text>.*)$")
MAX_TEXT = 16_000


def sender_for(worker: int | None) -> str:
    return "lead" if worker is None else f"W{worker}"


def format_line(line: BusLine) -> str:
    stamp = line.ts.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    text = line.text.replace("\\", "\\\\").replace("\r", "").replace("\n", "\\n")
    return f"{stamp} [{line.sender}] {text}\n"


def parse_line(raw: str) -> BusLine | None:
    """Parse a bus line; lines a worker appended by hand (`[W3] text`) parse without a timestamp."""
    m = LINE_RE.match(raw.rstrip("\n"))
    if not m:
        return None
    try:
        ts = dt.datetime.strptime(m["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return None
    return BusLine(ts=ts, sender=m["sender"], text=m["text"])


def post(run: RunFolder, worker: int | None, text: str | bytes) -> BusLine:
    if isinstance(text, str):
        # Command-line bytes that are not UTF-8 arrive as lone surrogates: refuse them as such bytes are.
        text = text.encode("utf-8", "surrogateescape")
    text = decode_text(text, "bus message")
    if not text.strip():
        raise UsageError("empty bus message", hint="give the text to post")
    if len(text) > MAX_TEXT:
        raise UsageError(f"bus message is {len(text)} characters", hint=f"keep it under {MAX_TEXT}")
    line = BusLine(ts=dt.datetime.now(dt.UTC), sender=sender_for(worker), text=text)
    data = format_line(line).encode()
    lock_fd = os.open(run.bus_lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        fd = os.open(run.bus, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            written = os.write(fd, data)
            if written != len(data):  # pragma: no cover - a full disk
                raise OSError(f"short write to {run.bus}: {written} of {len(data)} bytes")
        finally:
            os.close(fd)
    finally:
        os.close(lock_fd)  # closing releases the lock
    return line


def read_lines(run: RunFolder) -> list[str]:
    try:
        return run.bus.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []


def last_line_of(run: RunFolder, worker: int) -> str | None:
    """The newest bus line sent by `worker` (orch-stamped or hand-written `[Wn]`)."""
    tag = f"[{sender_for(worker)}]"
    for raw in reversed(read_lines(run)):
        if tag in raw.split(" ", 2)[:2] or raw.startswith(tag):
            return raw
    return None


def follow(run: RunFolder, start_at_end: bool = False) -> Iterator[str]:
    """Yield bus lines as they are appended (inotify), forever.

    The starting position is taken now, not at the first `next()`: nothing posted after this call
    is missed.
    """
    fh = run.bus.open("r", errors="replace")
    if start_at_end:
        fh.seek(0, os.SEEK_END)
    return _follow(fh, run)


def _follow(fh: TextIO, run: RunFolder) -> Iterator[str]:
    with fh:
        pending = ""
        for _ in watch_file(run.bus):
            chunk = fh.read()
            if not chunk:
                continue
            pending += chunk
            *complete, pending = pending.split("\n")
            yield from complete

"""The append-only bus: `bus.md`, one message per line, `<UTC timestamp> [W3] text`.

Posts take an exclusive flock and append with one write(2), so concurrent writers never lose a line,
never interleave two, and each writer's lines keep their order.

Under strict isolation no worker may write `bus.md`: workers post through `bus.sock` to the run's
controller (orch.run.listeners), which learns the sender from the connection itself (SO_PEERCRED: the
peer's uid is its worker, orch.run.uids; or a socket only one worker can reach) and stamps `[Wn]`
itself; `--as` can only name yourself. This module holds the wire format and the client.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import re
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from pydantic import BaseModel

from orch.errors import SandboxError, UsageError
from orch.run.files import decode_text
from orch.run.folder import RunFolder
from orch.run.paths import OWN_BUS, SANDBOX_SOCKETS
from orch.run.records import BusLine
from orch.run.uids import worker_of
from orch.run.workerpost import TIMEOUT, connect
from orch.settings.internal import SANDBOXED

LINE_RE = re.compile(r"^(?P<ts>\S+Z) \[(?P<sender>[^\]]+)\] (?P<text>.*)$")
MAX_TEXT = 16_000


def sender_for(worker: int | None) -> str:
    return "lead" if worker is None else f"W{worker}"


def format_line(line: BusLine) -> str:
    stamp = line.ts.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    text = line.text.replace("\\", "\\\\").replace("\r", "").replace("\n", "\\n")
    return f"{stamp} [{line.sender}] {text}\n"


def parse_line(raw: str) -> BusLine | None:
    """Parse a bus line; None for one not in the bus's format (a shared worker may append `[W3] text` by hand)."""
    m = LINE_RE.match(raw.rstrip("\n"))
    if not m:
        return None
    try:
        ts = dt.datetime.strptime(m["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return None
    return BusLine(ts=ts, sender=m["sender"], text=m["text"])


def post(run: RunFolder, worker: int | None, text: str | bytes, appender: Appender | None = None) -> BusLine:
    """Append one stamped line; `appender`: a long-lived writer's open files (the bus server's)."""
    if isinstance(text, str):
        # Command-line bytes that are not UTF-8 arrive as lone surrogates: refuse them as such bytes are.
        text = text.encode("utf-8", "surrogateescape")
    text = decode_text(text, "bus message")
    if not text.strip():
        raise UsageError("empty bus message", hint="give the text to post")
    if len(text) > MAX_TEXT:
        raise UsageError(f"bus message is {len(text)} characters", hint=f"keep it under {MAX_TEXT}")
    line = BusLine(ts=dt.datetime.now(dt.UTC), sender=sender_for(worker), text=text)
    (appender or Appender(run)).append(format_line(line).encode(), keep=appender is not None)
    return line


class Appender:
    """Appends to bus.md under the bus lock. A long-lived writer (the bus server, thousands of posts) keeps
    the lock file and bus.md open between posts instead of opening both for each; a file that was removed
    meanwhile (its link count 0) is opened afresh. Every append still takes the exclusive flock, so other
    writers (`bus.post` of a shared run) interleave only between whole lines."""

    def __init__(self, run: RunFolder) -> None:
        self.run = run
        self._lock_fd: int | None = None
        self._fd: int | None = None

    def append(self, data: bytes, keep: bool = True) -> None:
        try:
            if self._fd is not None and os.fstat(self._fd).st_nlink == 0:
                self.close()
            if self._lock_fd is None:
                self._lock_fd = os.open(self.run.bus_lock, os.O_RDWR | os.O_CREAT, 0o644)
            if self._fd is None:
                self._fd = os.open(self.run.bus, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                written = os.write(self._fd, data)
                if written != len(data):  # pragma: no cover - a full disk
                    raise OSError(f"short write to {self.run.bus}: {written} of {len(data)} bytes")
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        finally:
            if not keep:
                self.close()

    def close(self) -> None:
        for fd in (self._fd, self._lock_fd):
            if fd is not None:
                os.close(fd)
        self._fd = self._lock_fd = None


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
    from orch.waits import watch_file  # here: inotify's import is a tenth of a worker's `orch bus post`

    with fh:
        pending = ""
        for _ in watch_file(run.bus):
            chunk = fh.read()
            if not chunk:
                continue
            pending += chunk
            *complete, pending = pending.split("\n")
            yield from complete


# --- strict isolation: posts through the controller -------------------------------------------------
SOCKET_TIMEOUT = TIMEOUT  # a post waits as long from either client
MAX_REQUEST = 4 * MAX_TEXT + 1024  # the text JSON-escaped at worst, plus the envelope
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class PostRequest(BaseModel):
    sender: int | None = None
    """The worker the poster says it is (`--as`); checked against who the connection is."""
    text: str

    @staticmethod
    def reply(ok: bool, error: str = "") -> bytes:
        """The server's one answer line: `{"ok": true}` or `{"ok": false, "error": ...}`."""
        return json.dumps({"ok": True} if ok else {"ok": False, "error": error}).encode() + b"\n"


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket, from the kernel (SO_PEERCRED)."""
    _pid, uid, _gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    return int(uid)


def stamp_sender(uid: int, claimed: int | None, run_uid: int, fixed: int | None = None) -> int | None:
    """Who a post is from: the connection's worker, never what the poster claims. `fixed`: the socket's
    own worker (only that worker can reach it), whatever the uid. Otherwise the uid's worker; the
    controller's own uid (the lead, `orch bus post` forwarded from the host) may name anyone."""
    if fixed is not None:
        worker: int | None = fixed
    elif uid == run_uid:
        return claimed
    else:
        worker = worker_of(uid)
    if worker is None:
        raise UsageError(f"uid {uid} is not a worker of this run", hint="only the run's workers post here")
    if claimed is not None and claimed != worker:
        raise UsageError(f"you are worker {worker}: --as can only name yourself", hint=f"use --as {worker}")
    return worker


def own_socket(run: RunFolder) -> Path:
    """Where this process posts under strict isolation: in a local worker's sandbox its own socket of the
    relay's (which a relay started again serves there too), else the run's bus.sock."""
    return SANDBOX_SOCKETS / OWN_BUS if SANDBOXED.get() else run.bus_socket


def post_through_controller(run: RunFolder, worker: int | None, text: str, path: Path | None = None) -> None:
    """A post under strict isolation: to the controller (`path`, default the run's bus.sock), which
    stamps who sent it (orch.run.listeners)."""
    request = PostRequest(sender=worker, text=text).model_dump_json().encode() + b"\n"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(SOCKET_TIMEOUT)
            connect(sock, str(path or own_socket(run)))
            with contextlib.suppress(BrokenPipeError):  # refused at once (a cap): its one line is there to read
                sock.sendall(request)
            reply = sock.makefile("rb").readline(64 * 1024)
    except OSError as exc:
        raise SandboxError(
            f"cannot post to run {run.name}'s bus: {exc.strerror or exc}", hint="is the run still running?"
        ) from None
    try:
        answer = json.loads(reply)
    except ValueError:
        raise SandboxError(f"run {run.name}'s bus gave no answer", hint="is the run still running?") from None
    if not answer.get("ok"):
        raise UsageError(str(answer.get("error", "the bus refused the post")))

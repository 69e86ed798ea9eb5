"""The kernel's record of every task that exits (taskstats over generic netlink), for `--only roles`.

Why this source: a process that lives 20 ms (a hook, an `orch` call, a tmux client, bwrap, git) is gone
before any look at /proc sees it, and reaped children's rusage folds a grandchild into its parent. With a
listener registered on every CPU, the kernel sends one record per exiting thread, whoever its parent: its
pid, thread group, parent, uid, command name and CPU time. Nothing that exits is missed; a record lost
because this socket's buffer overflowed is counted (ENOBUFS), never silent. BSD process accounting
(`acct`) records the same exits, but in 10 ms units truncated per process, which loses a third of a short
hook. The CPU times here are the scheduler tick's samples (the kernel's utime and stime): unbiased, one
tick's error on each record, so a sum over many is right (checked against the cgroup's exact total in
bench/cpuwindow.py).

Needs CAP_NET_ADMIN (root) in the initial pid namespace; `Listener.check()` says why not otherwise.
The record's layout is the kernel's `struct taskstats` (linux/taskstats.h), which only ever grows at its
end: the fields read here are at fixed offsets since version 13 (ac_tgid). No netlink library is used:
pyroute2's taskstats module calls itself unfinished and knows two layouts, one of them wrong for 6.x.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass

NETLINK_GENERIC = 16
GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY, CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME = 3, 1, 2
TASKSTATS_CMD_GET = 1
TASKSTATS_CMD_ATTR_PID, TASKSTATS_CMD_ATTR_REGISTER_CPUMASK, TASKSTATS_CMD_ATTR_DEREGISTER_CPUMASK = 1, 3, 4
TASKSTATS_TYPE_PID, TASKSTATS_TYPE_STATS, TASKSTATS_TYPE_AGGR_PID = 1, 3, 4
NLM_F_REQUEST, NLMSG_ERROR = 1, 2
HEADER = struct.Struct("=IHHII")  # nlmsghdr
GENL = struct.Struct("=BBH")  # genlmsghdr
ATTR = struct.Struct("=HH")  # nlattr
MIN_VERSION = 13
BUFFER = 64 << 20
"""The socket's receive buffer: a burst of exits (64 workers' hooks at once) fits many times over."""


@dataclass(frozen=True)
class Exit:
    """One exited thread, as the kernel accounted it."""

    pid: int
    """The thread's id (the process's pid for its main thread)."""
    tgid: int
    ppid: int
    """The parent process at exit (an orphan's is its reaper's)."""
    uid: int
    comm: str
    started: float
    """When the thread began, seconds since the epoch (whole seconds: the kernel's ac_btime64)."""
    cpu: float
    """User plus system CPU seconds of this thread alone."""


def parse(stats: bytes) -> Exit | None:
    """A `struct taskstats`, or None if it is older than version 13 (no ac_tgid)."""
    if len(stats) < 376 or struct.unpack_from("=H", stats)[0] < MIN_VERSION:
        return None
    comm = stats[80:112].split(b"\0", 1)[0].decode(errors="replace")
    uid, _gid, pid, ppid = struct.unpack_from("=IIII", stats, 120)
    utime, stime = struct.unpack_from("=QQ", stats, 152)
    (started,) = struct.unpack_from("=Q", stats, 344)
    (tgid,) = struct.unpack_from("=I", stats, 368)
    return Exit(pid, tgid, ppid, uid, comm, float(started), (utime + stime) / 1e6)


def _attrs(buf: bytes) -> Iterator[tuple[int, bytes]]:
    at = 0
    while at + ATTR.size <= len(buf):
        length, kind = ATTR.unpack_from(buf, at)
        if length < ATTR.size:
            return
        yield kind & 0x3FFF, buf[at + ATTR.size : at + length]
        at += (length + 3) & ~3


def _attr(kind: int, data: bytes) -> bytes:
    length = ATTR.size + len(data)
    return ATTR.pack(length, kind) + data + b"\0" * (-length % 4)


def _messages(data: bytes) -> Iterator[tuple[int, bytes]]:
    at = 0
    while at + HEADER.size <= len(data):
        length, kind, _flags, _seq, _pid = HEADER.unpack_from(data, at)
        if length < HEADER.size:
            return
        yield kind, data[at + HEADER.size : at + length]
        at += (length + 3) & ~3


class Listener:
    """Every exit on this machine while it listens, from `start()` to `stop()`, gathered on a thread."""

    def __init__(self) -> None:
        self.exits: list[Exit] = []
        self.lost = 0
        """Overflows of the socket's buffer (each lost one or more records): a window with any is suspect."""
        self._sock: socket.socket | None = None
        self._family = 0
        self._mask = f"0-{(os.cpu_count() or 1) - 1}".encode() + b"\0"
        self._thread: threading.Thread | None = None
        self._stopping = False

    @staticmethod
    def check() -> str | None:
        """Why exits cannot be heard here, or None."""
        try:
            with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC) as sock:
                sock.bind((0, 0))
                family = _family(sock)
                sock.send(_request(family, _attr(TASKSTATS_CMD_ATTR_PID, struct.pack("=I", os.getpid()))))
                reply = sock.recv(65536)
        except OSError as exc:
            return f"taskstats: {exc}"
        for kind, body in _messages(reply):
            if kind == NLMSG_ERROR and struct.unpack_from("=i", body)[0] != 0:
                return f"taskstats: {os.strerror(-struct.unpack_from('=i', body)[0])}"
        if os.geteuid() != 0:
            return "taskstats: registering for every exit needs root (CAP_NET_ADMIN)"
        return None

    def start(self) -> None:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC)
        with contextlib.suppress(OSError):  # root may pass the system's cap on buffers
            sock.setsockopt(socket.SOL_SOCKET, 33, BUFFER)  # SO_RCVBUFFORCE
        sock.bind((0, 0))
        self._family = _family(sock)
        sock.send(_request(self._family, _attr(TASKSTATS_CMD_ATTR_REGISTER_CPUMASK, self._mask)))
        self._sock = sock
        self._thread = threading.Thread(target=self._read, name="taskstats", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Deregister, then read what is queued: every exit before this call is in `exits` after it."""
        sock, self._sock = self._sock, None
        if sock is None:
            return
        self._stopping = True
        with contextlib.suppress(OSError):
            sock.send(_request(self._family, _attr(TASKSTATS_CMD_ATTR_DEREGISTER_CPUMASK, self._mask)))
        if self._thread is not None:
            self._thread.join(10.0)
        sock.close()

    def _read(self) -> None:
        sock = self._sock
        assert sock is not None
        sock.settimeout(0.2)
        while True:
            try:
                data = sock.recv(1 << 20)
            except TimeoutError:
                if self._stopping:
                    return
                continue
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    self.lost += 1
                    continue
                return
            for kind, body in _messages(data):
                if kind == self._family:
                    self.exits.extend(_exits(body[GENL.size :]))


def _exits(body: bytes) -> Iterator[Exit]:
    for kind, nested in _attrs(body):
        if kind == TASKSTATS_TYPE_AGGR_PID:  # the thread's record; a group's (AGGR_TGID) carries no CPU
            for inner, stats in _attrs(nested):
                if inner == TASKSTATS_TYPE_STATS and (record := parse(stats)) is not None:
                    yield record


def _request(family: int, attrs: bytes) -> bytes:
    payload = GENL.pack(TASKSTATS_CMD_GET, 1, 0) + attrs
    return HEADER.pack(HEADER.size + len(payload), family, NLM_F_REQUEST, 0, 0) + payload


def _family(sock: socket.socket) -> int:
    """The TASKSTATS generic netlink family's id."""
    payload = GENL.pack(CTRL_CMD_GETFAMILY, 1, 0) + _attr(CTRL_ATTR_FAMILY_NAME, b"TASKSTATS\0")
    sock.send(HEADER.pack(HEADER.size + len(payload), GENL_ID_CTRL, NLM_F_REQUEST, 0, 0) + payload)
    for kind, body in _messages(sock.recv(65536)):
        if kind == GENL_ID_CTRL:
            for attr, value in _attrs(body[GENL.size :]):
                if attr == CTRL_ATTR_FAMILY_ID:
                    return int(struct.unpack_from("=H", value)[0])
    raise OSError(errno.ENOENT, "no TASKSTATS netlink family (a kernel without CONFIG_TASKSTATS)")

"""Every CPU-second a fleet spends between two moments, process by process (`--only roles`).

The fleet runs in a cgroup of its own (cgroup v2, made here; every command the bench starts for it enters
it first, and everything they start stays in it), so the kernel's own total for the fleet is its
`cpu.stat`: exact, exited processes included, but one figure. Per process the figures come from two
sources that together miss nothing:

- each boundary (`mark`) reads every live process of the cgroup (/proc, through orch.procs): its CPU so
  far, per thread, its command line and parent;
- between boundaries, the kernel's record of every thread that exits (bench/taskstats.py): the
  processes that live a few milliseconds, and the last CPU of those that end.

A process's share of a window is its CPU at the window's end (its exit, or the end boundary) less what it
had at the start boundary (nothing, if it started inside). An exited process belongs to the fleet if its
parent does, followed up the records (this process is a child subreaper, so an orphan's parent is never
init, and stays known). The sum over processes is checked against the cgroup's total (`Span.coverage`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from bench.taskstats import Exit, Listener
from orch import procs

PR_SET_CHILD_SUBREAPER = 36
SAME_START = 1.5
"""Seconds apart two start times may be and still name one process (taskstats gives whole seconds)."""


def cgroup2_root() -> Path | None:
    """Where the unified (v2) cgroup hierarchy is mounted, if it is."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) > 2 and parts[2] == "cgroup2":
                return Path(parts[1])
    return None


class Cgroup:
    """A cgroup v2 of the bench's own, for one fleet: its processes, its exact CPU total, a kill of all."""

    def __init__(self, name: str) -> None:
        root = cgroup2_root()
        if root is None:
            raise OSError("no cgroup v2 hierarchy is mounted")
        self.path = root / name
        self.path.mkdir()

    def argv(self, argv: list[str]) -> list[str]:
        """`argv` run inside this cgroup (a shell moves itself in, then execs it)."""
        return ["sh", "-c", 'echo 0 > "$0/cgroup.procs" && exec "$@"', str(self.path), *argv]

    def usage(self) -> float:
        """CPU seconds of every process that ever ran in the cgroup (cpu.stat's usage_usec)."""
        for line in (self.path / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        return 0.0

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def kill(self) -> None:
        """SIGKILL every process in it (cgroup.kill), then wait (bounded) until it is empty."""
        with contextlib.suppress(OSError):
            (self.path / "cgroup.kill").write_text("1")
        deadline = time.monotonic() + 20.0
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the cgroup's emptiness, bounded by the deadline

    def remove(self) -> None:
        self.kill()
        with contextlib.suppress(OSError):
            self.path.rmdir()


def become_subreaper() -> None:
    """Orphans of this process's descendants are re-parented here, not to init: their line stays known."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


@dataclass(frozen=True)
class Live:
    """A live process at a boundary."""

    pid: int
    ppid: int
    comm: str
    argv: tuple[str, ...]
    started: float
    cpu: float
    threads: dict[int, tuple[str, float]]
    """tid -> (its name, its CPU seconds)."""


@dataclass(frozen=True)
class Mark:
    at: float
    """time.monotonic() of the boundary."""
    exits: int
    """How many exit records had arrived."""
    usage: float
    live: dict[int, Live]


@dataclass
class Proc:
    """One process's share of a window."""

    pid: int
    ppid: int
    comm: str
    argv: tuple[str, ...]
    cpu: float
    exited: bool
    threads: dict[str, float] = field(default_factory=dict)
    """Named threads' CPU in the window (thread name -> seconds)."""
    parent: Proc | None = None


@dataclass
class Span:
    """A window: its processes, and the cgroup's own total to check their sum against."""

    seconds: float
    procs: list[Proc]
    cgroup_cpu: float
    lost: int

    @property
    def cpu(self) -> float:
        return sum(p.cpu for p in self.procs)

    @property
    def coverage(self) -> float:
        """Attributed CPU over the cgroup's total (1.0: nothing missed, nothing counted twice)."""
        return self.cpu / self.cgroup_cpu if self.cgroup_cpu > 0 else 1.0


def _read(pid: int) -> Live | None:
    seen = procs.snapshot(pid)
    if seen is None:
        return None
    return Live(pid, seen.ppid, seen.comm, tuple(seen.argv), seen.started, seen.cpu, seen.threads)


class Tracker:
    """A fleet's cgroup and the exits heard since `start`; `mark()` a boundary, `span(a, b)` a window."""

    def __init__(self, name: str) -> None:
        self.cgroup = Cgroup(name)
        self.listener = Listener()
        self.me = os.getpid()

    def start(self) -> None:
        become_subreaper()
        self.listener.start()

    def stop(self) -> None:
        self.listener.stop()
        self.cgroup.remove()

    def mark(self) -> Mark:
        at, usage = time.monotonic(), self.cgroup.usage()
        live = {pid: seen for pid in self.cgroup.pids() if (seen := _read(pid)) is not None}
        return Mark(at=at, exits=len(self.listener.exits), usage=usage, live=live)

    def span(self, begin: Mark, end: Mark) -> Span:
        exits = self.listener.exits[begin.exits : end.exits]
        members = attribute(begin, end, exits, self.me)
        return Span(end.at - begin.at, members, end.usage - begin.usage, self.listener.lost)


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= SAME_START


def attribute(begin: Mark, end: Mark, exits: list[Exit], root: int) -> list[Proc]:
    """Each member process's CPU in the window from `begin` to `end` (see the module's docstring)."""
    groups: dict[int, list[Exit]] = defaultdict(list)
    order: list[int] = []
    for record in exits:
        if record.tgid in end.live and _same(end.live[record.tgid].started, record.started):
            continue  # a thread of a process that still runs: its CPU is in the process's own at the end
        if record.tgid not in groups:
            order.append(record.tgid)
        groups[record.tgid].append(record)
    out: dict[int, Proc] = {}
    for pid, seen in end.live.items():
        before = begin.live.get(pid)
        was = before if before is not None and _same(before.started, seen.started) else None
        cpu = seen.cpu - (was.cpu if was else 0.0)
        threads: dict[str, float] = defaultdict(float)
        for tid, (name, used) in seen.threads.items():
            prior = was.threads.get(tid) if was else None
            threads[name] += used - (prior[1] if prior else 0.0)
        out[pid] = Proc(pid, seen.ppid, seen.comm, seen.argv, cpu, False, dict(threads))
    for tgid in order:
        records = groups[tgid]
        main = next((r for r in records if r.pid == tgid), records[-1])
        was = begin.live.get(tgid)
        was = was if was is not None and _same(was.started, main.started) else None
        cpu = 0.0
        threads = defaultdict(float)
        for record in records:
            prior = was.threads.get(record.pid) if was else None
            used = record.cpu - (prior[1] if prior else 0.0)
            cpu += used
            threads[record.comm] += used
        argv = was.argv if was else ()
        out.setdefault(tgid, Proc(tgid, main.ppid, main.comm, argv, cpu, True, dict(threads)))
    members = _members(out, begin, end, root)
    for proc in members:
        proc.parent = out.get(proc.ppid)
    return members


def _members(found: dict[int, Proc], begin: Mark, end: Mark, root: int) -> list[Proc]:
    """The processes of the fleet: live in its cgroup at a boundary, or descended from one that is (an
    orphan's parent is this process, the fleet's reaper)."""
    known = set(end.live) | set(begin.live)
    member: dict[int, bool] = {}

    def of(pid: int, depth: int = 0) -> bool:
        if pid in member:
            return member[pid]
        if pid in known:
            return True
        proc = found.get(pid)
        if proc is None or depth > procs.MAX_DEPTH:
            return False
        result = proc.ppid == root or of(proc.ppid, depth + 1)
        member[pid] = result
        return result

    return [proc for pid, proc in found.items() if of(pid)]

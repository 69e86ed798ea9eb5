"""This machine's processes, the one place that reads them (psutil): who runs as which uid, in which pid
namespace, a process's ancestry, children, command line and environment, what it uses.

A process may end at any moment while it is read: every function here answers for a gone process (an
empty list, None, False, zero) and never raises for it.
"""

from __future__ import annotations

import contextlib
import enum
import os
import platform
import stat
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import psutil

GONE = (psutil.Error, OSError, ValueError)
"""What reading a process that ended (or was never ours to read) raises (NoSuchProcess, ZombieProcess,
AccessDenied, or the OSError beneath): it reads as gone."""
MAX_DEPTH = 256
"""Ancestors followed at most (a chain is far shorter; the bound keeps a broken one finite)."""


class Unsettled(enum.Enum):
    NOT_YET = "not yet"


NOT_YET = Unsettled.NOT_YET
"""What a process's environment reads as in the instant inside its execve (`settled`): look again."""
FLAGS_FIELD, ENV_END_FIELD = 9, 51
"""/proc/PID/stat's flags and env_end, counted from 1 as proc(5) does."""
PF_KTHREAD = 0x00200000
"""A kernel thread: it has no memory of its own, so no environment to wait for."""


def pids() -> list[int]:
    return psutil.pids()


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except GONE:
        return None


def alive(pid: int) -> bool:
    """Whether a process runs (a zombie has ended: it only waits for its parent to read its status)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except GONE:
        return False


def stopped(pid: int) -> bool:
    """Whether a process is stopped (SIGSTOP, SIGTSTP, a tracer): it runs on only once sent SIGCONT."""
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except GONE:
        return False


def started(pid: int) -> float | None:
    """When a live process started (seconds since the epoch), None if it is gone."""
    try:
        return float(psutil.Process(pid).create_time())
    except GONE:
        return None


def uid(pid: int) -> int | None:
    """The real uid of a live process, None if it is gone."""
    try:
        return psutil.Process(pid).uids().real
    except GONE:
        return None


def of_uids(uids: set[int]) -> dict[int, int]:
    """Every live process (pid: real uid) owned by one of `uids`."""
    found = {}
    for proc in psutil.process_iter(["uids"]):
        owner = proc.info["uids"]
        if owner is not None and owner.real in uids:
            found[proc.pid] = owner.real
    return found


def uid_tasks(owner: int) -> int:
    """Processes and threads of a uid now (what RLIMIT_NPROC counts)."""
    total = 0
    for proc in psutil.process_iter(["uids", "num_threads"]):
        if proc.info["uids"] is not None and proc.info["uids"].real == owner:
            total += proc.info["num_threads"] or 0
    return total


def settled(pid: int) -> bool:
    """Whether a process's argument and environment areas are set; False if it is gone or not ours to read
    (the kernel shows it none of these fields). A parent's Popen returns as soon as the exec closes the
    child's close-on-exec pipe, which the kernel does early in execve, before it lays out the new program's
    stack: until then /proc/PID/environ and cmdline read empty (seen for a third of fresh children on a
    loaded machine), and the kernel's env_end is still 0."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # fields[0] is field 3
        return int(fields[ENV_END_FIELD - 3]) != 0 or bool(int(fields[FLAGS_FIELD - 3]) & PF_KTHREAD)
    except (OSError, IndexError, ValueError):
        return False


def cmdline(pid: int) -> list[str]:
    """A process's argv; empty if it is gone or a zombie (or inside its exec: `settled`)."""
    try:
        return psutil.Process(pid).cmdline()
    except GONE:
        return []


def command(pid: int) -> str:
    return " ".join(cmdline(pid)).strip()


def env_var(pid: int, name: str) -> str | Literal[Unsettled.NOT_YET] | None:
    """A variable of the environment a process was exec'd with; None if unset or the process is gone, NOT_YET
    while its exec has not set its environment (`settled`): not known yet, look again."""
    ready = settled(pid)  # first: once settled, what environ reads is the exec's
    try:
        env = psutil.Process(pid).environ()
    except GONE:  # a process not ours to read (its env_end reads 0 too) is refused here
        return None
    if ready or env:
        return env.get(name)
    return NOT_YET if alive(pid) else None


def children(pid: int) -> list[int]:
    """A process's children now. The kernel's own list (/proc/PID/task/*/children): psutil's walks every
    process of the machine for it."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            found += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except (OSError, ValueError):
            continue
    return found


def ancestry(pid: int) -> list[int] | None:
    """pid and its ancestors up to init; None when pid is gone or a zombie, or its line broke meanwhile."""
    chain = [pid]
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        while pid > 1 and len(chain) < MAX_DEPTH:
            pid = psutil.Process(pid).ppid()
            chain.append(pid)
    except GONE:
        return None
    return chain


def pid_namespace(pid: int) -> int | None:
    """The inode of a process's pid namespace (equal for two processes in one namespace), None if gone
    or not ours to read. psutil has no call for it."""
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return None


def last_pid() -> int:
    """The pid the kernel handed out last in this pid namespace (/proc/loadavg's last field): pids are
    handed out in increasing order, wrapping at pid_max, so between two reads only the pids in between
    can have been reused."""
    try:
        return int(Path("/proc/loadavg").read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return -1


def pid_max() -> int:
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        return 1 << 22


def reused_between(before: int, after: int, top: int) -> range | tuple[range, range] | None:
    """The pids the kernel may have handed out since `before` was last_pid(), now `after`: (before, after],
    wrapped at `top` (pid_max); None when unknown (everything may be new)."""
    if before < 0 or after < 0:
        return None
    if after >= before:
        return range(before + 1, after + 1)
    return (range(before + 1, top), range(1, after + 1))


def in_span(pid: int, span: range | tuple[range, range] | None) -> bool:
    if span is None:
        return True
    if isinstance(span, range):
        return pid in span
    return pid in span[0] or pid in span[1]


@dataclass(frozen=True)
class Load:
    """What a set of processes uses now."""

    tasks: int = 0
    """Processes and threads (what RLIMIT_NPROC and the pids cgroup count)."""
    memory: int = 0
    """Resident bytes together (shared pages counted in each: an overestimate)."""


PAGE = os.sysconf("SC_PAGE_SIZE")
STATE_FIELD, THREADS_FIELD, RSS_FIELD = 3, 20, 24
"""/proc/PID/stat's state, num_threads and rss (in pages), counted from 1 as proc(5) does."""


def usage(pids: Iterable[int]) -> dict[int, Load]:
    """Each live process's own tasks and resident memory, from one read of /proc/PID/stat each; a process that
    is gone or a zombie is left out. The watchdog reads every worker process this way at every look: psutil's
    Process and its reads cost seven times as much (bench/README.md, "Where a fleet's CPU goes")."""
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()  # fields[0] is field 3
        except OSError:
            continue
        if len(fields) <= RSS_FIELD - 3 or fields[STATE_FIELD - 3] in (b"Z", b"X"):
            continue
        out[pid] = Load(tasks=int(fields[THREADS_FIELD - 3]), memory=int(fields[RSS_FIELD - 3]) * PAGE)
    return out


def load(pids: Iterable[int]) -> Load:
    """What these processes use together (those gone or zombies left out)."""
    each = usage(pids).values()
    return Load(tasks=sum(u.tasks for u in each), memory=sum(u.memory for u in each))


def held_files(pids: Iterable[int], skip: Iterable[int] = ()) -> int:
    """Bytes held in files these processes keep open that have no name any more: a memfd (memory that no RSS
    counts while it is not mapped) or a deleted file (a walk of the folders cannot see it). Each file once;
    those on a device in `skip` (a file system measured whole) left out."""
    devices, seen, total = set(skip), set(), 0
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            path = f"/proc/{pid}/fd/{fd}"
            try:
                target = os.readlink(path)
                if not (target.startswith("/memfd:") or target.endswith(" (deleted)")):
                    continue
                st = os.stat(path)
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if stat.S_ISREG(st.st_mode) and st.st_dev not in devices and key not in seen:
                seen.add(key)
                total += st.st_blocks * 512
    return total


def mounts_used(pid: int, mounts: Iterable[str]) -> tuple[int, set[int]]:
    """Bytes in use on each of `mounts` (file systems: a sandbox's tmpfs) as process `pid` sees them (its mount
    namespace, through /proc/PID/root), together, and their devices; (0, set()) for a process gone. A mount that
    is this process's own file system there is none of the sandbox's: a sandbox being set up (its namespace made,
    its tmpfs not mounted yet) shows the host's /tmp, whose every byte would count."""
    used, devices = 0, set()
    for mount in mounts:
        where = f"/proc/{pid}/root{mount}"
        try:
            fs, st = os.statvfs(where), os.stat(where)
            if st.st_dev == os.stat(mount).st_dev:
                continue
        except OSError:
            continue
        used += (fs.f_blocks - fs.f_bfree) * fs.f_frsize
        devices.add(st.st_dev)
    return used, devices


def mount_namespace(pid: int) -> int | None:
    """The inode of a process's mount namespace, None if gone or not ours to read."""
    try:
        return os.stat(f"/proc/{pid}/ns/mnt").st_ino
    except OSError:
        return None


# --- What a process tree costs (the bench's figures): CPU, memory, wake-ups, inotify watches ------------
MAX_TREE = 10_000
"""Processes visited per tree walk: a bound, never reached in practice."""


def tree(pid: int) -> list[int]:
    """`pid` and all its descendants alive now (empty if pid is gone)."""
    out: list[int] = []
    todo = [pid]
    while todo and len(out) < MAX_TREE:
        current = todo.pop()
        if not psutil.pid_exists(current):
            continue
        out.append(current)
        todo += children(current)
    return out


@dataclass(frozen=True)
class CpuTimes:
    """Seconds of CPU: the process itself, and its children it has already reaped."""

    own: float
    reaped_children: float

    @property
    def total(self) -> float:
        return self.own + self.reaped_children


def cpu_times(pid: int) -> CpuTimes | None:
    """A process's CPU seconds, None if it is gone."""
    try:
        t = psutil.Process(pid).cpu_times()
    except GONE:
        return None
    return CpuTimes(own=t.user + t.system, reaped_children=t.children_user + t.children_system)


def rss(pid: int) -> int:
    """Resident bytes (0 if gone)."""
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except GONE:
        return 0


def pss(pid: int) -> int:
    """Proportional set size: shared pages split among the processes that share them (0 if gone or not
    ours to read: it needs the right to trace the process)."""
    try:
        return int(psutil.Process(pid).memory_full_info().pss)
    except GONE:
        return 0


def voluntary_switches(pid: int) -> int:
    """Times the process (all its threads: psutil's count is the first thread's alone) blocked and was woken
    again, subprocess waits included; 0 if gone."""
    try:
        threads = psutil.Process(pid).threads()
    except GONE:
        return 0
    total = 0
    for thread in threads:
        try:
            total += psutil.Process(thread.id).num_ctx_switches().voluntary  # a thread id reads as a pid
        except GONE:
            continue
    return total


def inotify_watches(pid: int) -> set[int]:
    """Inode numbers a process watches with inotify now, over all its fds (/proc/PID/fdinfo: psutil has
    no call for it); empty if gone."""
    inodes: set[int] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fdinfo")
    except OSError:
        return inodes
    for fd in fds:
        try:
            text = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("inotify "):
                inodes |= {int(part[4:], 16) for part in line.split() if part.startswith("ino:")}
    return inodes


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo: psutil has no call for it), or what platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


@dataclass(frozen=True)
class Snapshot:
    """One live process at one moment: its parent, names, CPU so far, and each thread's (the bench's
    per-process accounting, bench/cpuwindow.py)."""

    ppid: int
    comm: str
    argv: list[str]
    started: float
    cpu: float
    """User plus system seconds of the whole process, its ended threads included."""
    threads: dict[int, tuple[str, float]]
    """tid -> (the thread's name, as `name_thread` set it; its CPU seconds)."""


def snapshot(pid: int) -> Snapshot | None:
    """A live process as it is now; None if it is gone or a zombie."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            times = proc.cpu_times()
            seen = Snapshot(proc.ppid(), proc.name(), proc.cmdline(), proc.create_time(), times.user + times.system, {})
            threads = proc.threads()
    except GONE:
        return None
    for thread in threads:
        try:
            name = Path(f"/proc/{pid}/task/{thread.id}/comm").read_text().strip()
        except OSError:
            continue
        seen.threads[thread.id] = (name, thread.user_time + thread.system_time)
    return seen


def name_thread(name: str) -> None:
    """Give the calling thread `name` where the system shows it (ps -L, top -H, the kernel's accounting):
    Python 3.11 names threads for itself alone. Best effort: a name is an aid, never a need."""
    with contextlib.suppress(OSError):
        Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text(name[:15])

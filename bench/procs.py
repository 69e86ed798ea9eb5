"""What /proc says about processes: trees, CPU time, memory, inotify watches, machine facts."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

from orch.procs import children

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
MAX_TREE = 10_000  # processes visited per tree walk: a bound, never reached in practice


@dataclass(frozen=True)
class CpuTimes:
    """Seconds of CPU: the process itself, and its children it has already reaped."""

    own: float
    reaped_children: float

    @property
    def total(self) -> float:
        return self.own + self.reaped_children


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 2 (comm) may hold spaces and parentheses: split after the last ')'.
    return raw[raw.rfind(")") + 2 :].split()


def cpu_times(pid: int) -> CpuTimes | None:
    fields = _stat_fields(pid)
    if fields is None:
        return None
    utime, stime, cutime, cstime = (int(fields[i]) for i in (11, 12, 13, 14))
    return CpuTimes(own=(utime + stime) / CLK_TCK, reaped_children=(cutime + cstime) / CLK_TCK)


def own_cpu(pid: int | None) -> float:
    """A process's own CPU seconds, not its children's (the tmux server: its panes are the agents)."""
    times = cpu_times(pid) if pid else None
    return times.own if times else 0.0


def tree(pid: int) -> list[int]:
    """`pid` and all its descendants alive now."""
    out: list[int] = []
    todo = [pid]
    while todo and len(out) < MAX_TREE:
        current = todo.pop()
        if not Path(f"/proc/{current}").exists():
            continue
        out.append(current)
        todo += children(current)  # the kernel's own list (orch.procs)
    return out


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process tree: every live member plus what each has reaped."""
    total = 0.0
    for member in tree(pid):
        times = cpu_times(member)
        if times is not None:
            total += times.total
    return total


def tree_reaped_cpu(pid: int) -> float:
    """CPU seconds of the short-lived children a tree's members have already reaped (hook commands)."""
    total = 0.0
    for member in tree(pid):
        times = cpu_times(member)
        if times is not None:
            total += times.reaped_children
    return total


def _status_kib(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def voluntary_switches(pid: int) -> int:
    """Times the process (all its threads) blocked and was woken again (subprocess waits included)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return total
    for tid in tasks:
        try:
            for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return total


def rss_bytes(pid: int) -> int:
    return _status_kib(pid, "VmRSS") * 1024


def pss_bytes(pid: int) -> int:
    """Proportional set size: shared pages split among the processes that share them."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


@dataclass(frozen=True)
class Memory:
    rss: int
    pss: int
    processes: int


def tree_memory(pid: int) -> Memory:
    members = tree(pid)
    return Memory(
        rss=sum(rss_bytes(p) for p in members),
        pss=sum(pss_bytes(p) for p in members),
        processes=len(members),
    )


def inotify_watches(pid: int) -> set[int]:
    """Inode numbers (as hex-decoded ints) that `pid` currently watches with inotify, over all its fds."""
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
                for part in line.split():
                    if part.startswith("ino:"):
                        inodes.add(int(part[4:], 16))
    return inodes


def meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes."""
    out: dict[str, int] = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts:
                out[key] = int(parts[0]) * (1024 if len(parts) > 1 else 1)
    except (OSError, ValueError):
        pass
    return out


def loadavg() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except (OSError, ValueError):
        return []


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict[str, object]:
    mem = meminfo()
    return {
        "hostname": platform.node(),
        "kernel": platform.release(),
        "cpu": cpu_model(),
        "cores": os.cpu_count() or 0,
        "memory_total_bytes": mem.get("MemTotal", 0),
        "memory_available_bytes": mem.get("MemAvailable", 0),
        "python": platform.python_version(),
        "loadavg_at_start": loadavg(),
    }

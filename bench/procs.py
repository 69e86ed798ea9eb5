"""What the bench reads of processes and the machine: trees' CPU time and memory, wake-ups, inotify watches,
machine facts. The reading is orch.procs's (psutil), the one place that reads processes; here, sums."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass

import psutil

from orch.procs import CpuTimes, cpu_model, cpu_times, inotify_watches, pss, rss, snapshot, tree, voluntary_switches

__all__ = ["CpuTimes", "Memory", "available_memory", "cpu_times", "inotify_watches", "machine", "own_cpu", "rss"]
__all__ += ["snapshot", "tree", "tree_cpu", "tree_memory", "tree_reaped_cpu", "voluntary_switches"]


def own_cpu(pid: int | None) -> float:
    """A process's own CPU seconds, not its children's (the tmux server: its panes are the agents)."""
    times = cpu_times(pid) if pid else None
    return times.own if times else 0.0


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process tree: every live member plus what each has reaped."""
    return sum(times.total for member in tree(pid) if (times := cpu_times(member)) is not None)


def tree_reaped_cpu(pid: int) -> float:
    """CPU seconds of the short-lived children a tree's members have already reaped (hook commands)."""
    return sum(times.reaped_children for member in tree(pid) if (times := cpu_times(member)) is not None)


@dataclass(frozen=True)
class Memory:
    rss: int
    pss: int
    processes: int


def tree_memory(pid: int) -> Memory:
    members = tree(pid)
    return Memory(rss=sum(rss(p) for p in members), pss=sum(pss(p) for p in members), processes=len(members))


def available_memory() -> int:
    """Bytes the machine can give without swapping (MemAvailable)."""
    return int(psutil.virtual_memory().available)


def machine() -> dict[str, object]:
    memory = psutil.virtual_memory()
    return {
        "hostname": platform.node(),
        "kernel": platform.release(),
        "cpu": cpu_model(),
        "cores": os.cpu_count() or 0,
        "memory_total_bytes": memory.total,
        "memory_available_bytes": memory.available,
        "python": platform.python_version(),
        "loadavg_at_start": list(os.getloadavg()),
    }

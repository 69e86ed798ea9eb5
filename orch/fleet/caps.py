"""Per-worker caps (SECURITY.md, "Caps"): what a pane starts under, and which worker is past a cap.

- `limit_argv`: the prefix a pane runs its agent under, after it became its worker (so the worker, with
  no capability, can never raise them): `prlimit` with hard limits on processes (RLIMIT_NPROC: per uid,
  so only where each worker has its own: strict isolation in a container), each file's size (RLIMIT_FSIZE) and
  core dumps, then `choom`, which makes the worker the kernel's first pick when memory runs out, never
  the controller or the gateway.
- `breaches`: the decision, pure: which workers a look found past a cap.

What no kernel limit covers here is the controller's watchdog (orch.fleet.watchdog): it measures each
worker (orch.fleet.workerprocs: whose processes; orch.procs: what they use; orch.fleet.diskuse: what they
wrote) and stops a worker past a cap (orch.fleet.stopping). The engine gives the container no cgroup of
its own to delegate (cgroup v1, read-only), and RLIMIT_AS cannot bound Node (V8 reserves far more address
space than it uses), so memory and disk are the watchdog's.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from orch import procs
from orch.run.records import WorkerCaps
from orch.settings.limits import CAPS_RESERVE

OOM_FIRST = 1000
"""The pane's oom_score_adj: the most a process may raise it, so a worker dies before anything of the run."""
NICE = 10
"""The pane's niceness in a container: a worker busy forking or spinning leaves the CPU to the controller,
tmux and the gateway first (it cannot lower it again: RLIMIT_NICE is 0 and it has no capability)."""
MAX_FILES = 200_000
"""Files one worker may write where the disk walk measures it (orch.fleet.diskuse): one more is past its disk
cap, and the walk reads no further into what is its."""
DISK_CAPS = ("disk", "files", "run-folder")
"""Breaches of what a worker wrote: its outbox is emptied when it is stopped."""
WATCH_INTERVAL = 0.5
"""Seconds between two looks at the workers' processes."""


def limit_argv(caps: WorkerCaps, per_uid: bool, workers: int) -> list[str]:
    """`prlimit ... -- choom -n 1000 --`: the hard limits a pane's agent starts under (run as the worker).
    RLIMIT_NPROC counts every process of a uid: under strict isolation each worker has its own, so the cap
    is the worker's; sharing the user's uid, it can only bound the uid's growth (local_nproc), and the
    watchdog holds each worker to its own cap. The kernel never applies it to root."""
    argv = ["prlimit", "--core=0"]
    if caps.pids is not None:
        nproc = caps.pids if per_uid else local_nproc(_uid_tasks(), caps, workers)
        argv.append(f"--nproc={nproc}")
    if caps.disk is not None:
        argv.append(f"--fsize={caps.disk}")
    # Niced only in the container, where the run's own processes are all it competes with: on a machine
    # of its own a worker would yield to everything else too (and a local bomb is the watchdog's).
    nice = ["--", "nice", "-n", str(NICE)] if per_uid else ["--"]  # `--`: the agent's own options are its
    return [*argv, "--", "choom", "-n", str(OOM_FIRST), *nice]


def container_pids(caps: WorkerCaps, workers: int, asked: int) -> int:
    """The container's pids limit: what was asked, raised so the workers at their caps still leave the
    run's own processes (controller, tmux, gateway) a reserve: a fork bomb never starves them."""
    if caps.pids is None:
        return asked
    return max(asked, caps.pids * workers + CAPS_RESERVE)


_LAUNCH = threading.local()
"""This thread's count of the user's tasks while a launch starts its panes (`counted_once`)."""


@contextlib.contextmanager
def counted_once() -> Iterator[None]:
    """While a launch starts its panes: the user's tasks counted once for all their prefixes, not once a pane (a
    count reads every process of the machine: 19 s of a launch of 64 workers on a busy machine, bench/README.md)."""
    _LAUNCH.tasks = None
    try:
        yield
    finally:
        del _LAUNCH.tasks


def _uid_tasks() -> int:
    if not hasattr(_LAUNCH, "tasks"):
        return procs.uid_tasks(os.getuid())
    if _LAUNCH.tasks is None:
        _LAUNCH.tasks = procs.uid_tasks(os.getuid())
    return int(_LAUNCH.tasks)


USER_GROWTH = 4096
"""Tasks the user's own uid may add while a local run lasts (a browser opening), at least."""


def local_nproc(now: int, caps: WorkerCaps, workers: int) -> int:
    """RLIMIT_NPROC of a pane sharing the user's uid: what the uid runs now, as much again (at least
    USER_GROWTH) for the user's own programs, and every worker at its cap: far below what takes a machine
    down, far above what the user's own work needs."""
    return now + max(now, USER_GROWTH) + (caps.pids or 0) * workers + CAPS_RESERVE


@dataclass(frozen=True)
class Usage:
    """One worker at one moment."""

    tasks: int = 0
    """Processes and threads (what RLIMIT_NPROC and the pids cgroup count)."""
    memory: int = 0
    """Resident bytes of its processes together (shared pages counted in each: an overestimate)."""
    disk: int = 0
    """Bytes of the files it wrote (allocated blocks: a sparse file counts what it holds)."""
    spawned: int = 0
    """Its processes alive now that were not at the last look: a fork bomb churns below any count."""
    files: int = 0
    """Files and folders of its that the disk walk met (orch.fleet.diskuse)."""


@dataclass(frozen=True)
class Breach:
    worker: int
    cap: str
    """pids, forks, memory, disk, files or run-folder."""
    used: int
    limit: int

    def reason(self) -> str:
        what = {
            "pids": "processes and threads",
            "forks": f"processes new within {WATCH_INTERVAL:g}s",
            "memory": "resident memory",
            "disk": "bytes written",
            "files": "files written",
        }
        unit = "" if self.cap in ("pids", "forks", "files") else " bytes"
        name = what.get(self.cap, "the run folder's size")
        return f"over its {self.cap} cap: {name} {self.used}{unit} (cap {self.limit}{unit})"


def fork_limit(pids: int) -> int:
    """New processes alive at one look past which a worker is forking without end: a fork bomb held at
    RLIMIT_NPROC churns (its processes exit as others start), so its count may stay below the cap while
    the kernel keeps refusing its forks (measured: 70 to 120 new at each look under a cap of 256); an
    honest build starts a few dozen at most within one look."""
    return max(32, pids // 8)


def breaches(caps: WorkerCaps, usage: dict[int, Usage], folder: int | None) -> list[Breach]:
    """Which workers are past a cap. A worker at its process cap is past it: the kernel refuses it more,
    and an honest agent stays far below. Past the run folder's cap, its biggest writer is stopped."""
    found = []
    for n, used in sorted(usage.items()):
        if caps.pids is not None and used.tasks >= caps.pids:
            found.append(Breach(n, "pids", used.tasks, caps.pids))
        elif caps.pids is not None and used.spawned >= fork_limit(caps.pids):
            found.append(Breach(n, "forks", used.spawned, fork_limit(caps.pids)))
        elif caps.memory is not None and used.memory > caps.memory:
            found.append(Breach(n, "memory", used.memory, caps.memory))
        elif caps.disk is not None and used.disk > caps.disk:
            found.append(Breach(n, "disk", used.disk, caps.disk))
        elif caps.disk is not None and used.files > MAX_FILES:
            found.append(Breach(n, "files", used.files, MAX_FILES))
    if caps.run_folder is not None and folder is not None and folder > caps.run_folder and usage:
        biggest = max(usage, key=lambda n: usage[n].disk)
        if usage[biggest].disk > 0 and biggest not in {b.worker for b in found}:
            found.append(Breach(biggest, "run-folder", folder, caps.run_folder))
    return found

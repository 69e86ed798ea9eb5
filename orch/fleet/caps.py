"""Per-worker caps (SECURITY.md, "Caps"): what a pane starts under, and the watchdog for what no kernel
limit covers here.

- `limit_argv`: the prefix a pane runs its agent under, after it became its worker (so the worker, with
  no capability, can never raise them): `prlimit` with hard limits on processes (RLIMIT_NPROC: per uid,
  so only where each worker has its own: strict isolation in a container), each file's size (RLIMIT_FSIZE) and
  core dumps, then `choom`, which makes the worker the kernel's first pick when memory runs out, never
  the controller or the gateway.
- `Watchdog`: the controller's thread that measures each worker (processes and threads, resident memory,
  bytes written) and the run folder, and stops a worker past a cap at once. The engine gives the
  container no cgroup of its own to delegate (cgroup v1, read-only), and RLIMIT_AS cannot bound Node (V8
  reserves far more address space than it uses), so memory and disk are the watchdog's.
- `stop`: a worker's processes, or a chosen few of them, stopped with SIGTERM, then SIGKILL past a
  deadline; under strict isolation by a helper the run's tmux server starts as the worker (the controller
  may not signal another uid), which is how a pane starts too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from orch import settings
from orch.errors import SandboxError
from orch.fleet.tmux import TmuxServer
from orch.run.folder import RunFolder
from orch.run.records import Backend, Isolation, RunInfo, WorkerCaps
from orch.run.uids import drop_argv, worker_of, worker_uid

log = logging.getLogger(__name__)

OOM_FIRST = 1000
"""The pane's oom_score_adj: the most a process may raise it, so a worker dies before anything of the run."""
NICE = 10
"""The pane's niceness in a container: a worker busy forking or spinning leaves the CPU to the controller,
tmux and the gateway first (it cannot lower it again: RLIMIT_NICE is 0 and it has no capability)."""
WATCH_INTERVAL = 0.5
"""Seconds between two looks at the workers' processes."""
DISK_EVERY = 4
"""Every this many looks the watchdog also walks the run folder (files cost more than /proc)."""
STOP_GRACE = 2.0
"""Seconds stray processes get after SIGTERM before SIGKILL."""
STOP_DEADLINE = 10.0
"""Seconds to get every stray gone (a fork bomb respawns: each round freezes, then kills, what it finds)."""
MAX_FILES = 200_000
"""Files the watchdog walks per look; a worker that makes more is past its disk cap in another way."""

# Run as the worker (strict isolation) by the run's tmux server: signal the pids given, or with none every
# process of the worker's uid but this one (kill(-1)); with `--clear DIR`, empty DIR (its outbox) too.
HELPER = (
    "import os,shutil,signal,sys\n"
    "a=sys.argv[1:]\n"
    "d=a.pop(a.index('--clear')+1) if '--clear' in a else None\n"
    "a=[x for x in a if x!='--clear']\n"
    "for s in a[0].split(','):\n"
    "    for p in a[1:] or ['-1']:\n"
    "        try: os.kill(int(p),signal.Signals['SIG'+s])\n"
    "        except OSError: pass\n"
    "for e in os.scandir(d) if d else []:\n"
    "    try: shutil.rmtree(e.path) if e.is_dir(follow_symlinks=False) else os.unlink(e.path)\n"
    "    except OSError: pass\n"
)


def own_uids(info: RunInfo) -> bool:
    """Whether each worker runs as a uid of its own (strict isolation in a container: orch.run.uids). A
    local sandbox (bubblewrap) keeps the user's uid: its workers are told apart like shared ones."""
    return info.isolation is Isolation.STRICT and info.backend is Backend.DOCKER


def limit_argv(caps: WorkerCaps, per_uid: bool, workers: int) -> list[str]:
    """`prlimit ... -- choom -n 1000 --`: the hard limits a pane's agent starts under (run as the worker).
    RLIMIT_NPROC counts every process of a uid: under strict isolation each worker has its own, so the cap
    is the worker's; sharing the user's uid, it can only bound the uid's growth (local_nproc), and the
    watchdog holds each worker to its own cap. The kernel never applies it to root."""
    argv = ["prlimit", "--core=0"]
    if caps.pids is not None:
        nproc = caps.pids if per_uid else local_nproc(uid_tasks(os.getuid()), caps, workers)
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
    return max(asked, caps.pids * workers + settings.CAPS_RESERVE)


USER_GROWTH = 4096
"""Tasks the user's own uid may add while a local run lasts (a browser opening), at least."""


def local_nproc(now: int, caps: WorkerCaps, workers: int) -> int:
    """RLIMIT_NPROC of a pane sharing the user's uid: what the uid runs now, as much again (at least
    USER_GROWTH) for the user's own programs, and every worker at its cap: far below what takes a machine
    down, far above what the user's own work needs."""
    return now + max(now, USER_GROWTH) + (caps.pids or 0) * workers + settings.CAPS_RESERVE


def uid_tasks(uid: int) -> int:
    """Processes and threads of a uid now."""
    total = 0
    for pid in all_pids():
        status = _status(pid)
        owner, threads = status.get("Uid", "").split()[:1], status.get("Threads", "0")
        if owner == [str(uid)] and threads.isdigit():
            total += int(threads)
    return total


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


@dataclass(frozen=True)
class Breach:
    worker: int
    cap: str
    """pids, memory, disk or run-folder."""
    used: int
    limit: int

    def reason(self) -> str:
        what = {
            "pids": "processes and threads",
            "forks": f"processes new within {WATCH_INTERVAL:g}s",
            "memory": "resident memory",
            "disk": "bytes written",
        }
        unit = "" if self.cap in ("pids", "forks") else " bytes"
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
    if caps.run_folder is not None and folder is not None and folder > caps.run_folder and usage:
        biggest = max(usage, key=lambda n: usage[n].disk)
        if usage[biggest].disk > 0 and biggest not in {b.worker for b in found}:
            found.append(Breach(biggest, "run-folder", folder, caps.run_folder))
    return found


# --- processes ---------------------------------------------------------------------------------------


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError:
        return b""


def all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").glob("[0-9]*")]


def processes_by_worker(run: RunFolder, info: RunInfo, workers: Iterable[int]) -> dict[int, set[int]]:
    """Each worker's live processes: with a uid each (own_uids) those of its uid; otherwise those that inherit
    its supervisor's state-file variable (a process that clears its environment escapes this: SECURITY.md)."""
    wanted = set(workers)
    found: dict[int, set[int]] = {n: set() for n in wanted}
    if own_uids(info):
        for pid in all_pids():
            uid = _status(pid).get("Uid", "").split()[:1]
            n = worker_of(int(uid[0])) if uid and uid[0].isdigit() else None
            if n in wanted:
                found[n].add(pid)
        return found
    marks = {n: f"\0{settings.STATE_FILE.name}={run.state(n)}\0".encode() for n in wanted}
    for pid in all_pids():
        env = b"\0" + _read(f"/proc/{pid}/environ")
        for n, mark in marks.items():
            if mark in env:
                found[n].add(pid)
    return found


def _status(pid: int) -> dict[str, str]:
    fields = {}
    for line in _read(f"/proc/{pid}/status").decode(errors="replace").splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def measure_processes(pids: Iterable[int]) -> Usage:
    tasks = memory = 0
    for pid in pids:
        status = _status(pid)
        threads, rss = status.get("Threads", "0"), status.get("VmRSS", "0 kB").split()[0]
        tasks += int(threads) if threads.isdigit() else 0
        memory += int(rss) * 1024 if rss.isdigit() else 0
    return Usage(tasks=tasks, memory=memory)


# --- disk --------------------------------------------------------------------------------------------


def worker_areas(run: RunFolder, n: int) -> list[Path]:
    """Where worker n writes in the run folder (shared isolation: files there tell no uid), and its
    transcript, which tmux writes as the run's uid but whose bytes the worker's screen decides."""
    return [run.outbox(n), run.sessions(n), run.config_dir(n), run.state(n), run.log(n)]


def measure_disk(run: RunFolder, info: RunInfo, workers: Iterable[int]) -> tuple[dict[int, int], int]:
    """Bytes each worker wrote, and the run folder's total. With a uid each (own_uids) a file's owner says
    whose it is, wherever the worker could write (the run folder, its home's tmpfs, /tmp); otherwise where
    it lies does."""
    wanted = list(workers)
    per = dict.fromkeys(wanted, 0)
    strict = own_uids(info)
    areas = {n: [str(p) for p in worker_areas(run, n)] for n in wanted}
    transcripts = {str(run.log(n)): n for n in wanted}
    total = 0
    seen: set[tuple[int, int]] = set()
    roots = [run.root] + ([Path("/tmp"), Path(os.environ.get("HOME", "/"))] if strict and _in_container() else [])
    for root in roots:
        for counted, (path, st_uid, size) in enumerate(_walk(root, seen), 1):
            if root == run.root:
                total += size
            if strict:
                n = worker_of(st_uid) or transcripts.get(path)
                if n in per:
                    per[n] += size
            else:
                for n, prefixes in areas.items():
                    if any(path == p or path.startswith(p + os.sep) for p in prefixes):
                        per[n] += size
                        break
            if counted >= MAX_FILES:
                break
    return per, total


def _in_container() -> bool:
    return settings.IN_CONTAINER.get()


def _walk(root: Path, seen: set[tuple[int, int]]) -> Iterable[tuple[str, int, int]]:
    """(path, owner, bytes allocated) of every file and folder under root, links never followed, each
    inode once (hard links)."""
    stack = [str(root)]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if key in seen:
                continue
            seen.add(key)
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            yield entry.path, st.st_uid, st.st_blocks * 512


# --- stopping ----------------------------------------------------------------------------------------


@dataclass
class Stopped:
    killed: list[int] = field(default_factory=list)
    survived: list[int] = field(default_factory=list)


def signal_worker(info: RunInfo, n: int, signals: str, pids: Iterable[int] | None, clear: Path | None = None) -> None:
    """Send `signals` (comma-separated names: STOP,KILL) to worker n's `pids`, or (None) to every process
    of the worker; with `clear`, empty that folder as the worker afterwards (strict isolation only)."""
    chosen = sorted(pids) if pids is not None else None
    if not own_uids(info):
        targets = chosen if chosen is not None else []
        for name in signals.split(","):
            for pid in targets:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.Signals["SIG" + name])
        return
    uid = worker_uid(n)
    argv = [*drop_argv(uid, uid), sys.executable, "-c", HELPER, signals, *(str(p) for p in chosen or [])]
    if clear is not None:
        argv += ["--clear", str(clear)]
    # The run's tmux server keeps SETUID/SETGID for the panes; the controller may have no capability at all.
    TmuxServer(info.tmux_socket).run_shell(shlex.join(argv) + " >/dev/null 2>&1")


def stop(
    info: RunInfo,
    n: int,
    find: Callable[[], set[int]],
    grace: float = STOP_GRACE,
    deadline: float = STOP_DEADLINE,
) -> Stopped:
    """Stop what `find` lists (worker n's strays): SIGTERM, up to `grace` seconds to go, then rounds of
    SIGSTOP and SIGKILL (a stopped process cannot fork) until none is left or `deadline` passed."""
    result = Stopped()
    first = find()
    if not first:
        return result
    seen = set(first)
    signal_worker(info, n, "TERM,CONT", first)
    end_grace = time.monotonic() + grace
    left = first
    while left and time.monotonic() < end_grace:
        time.sleep(0.05)  # polling a kill with a deadline: no event says a process of another uid ended
        left = find()
        seen |= left
    end = time.monotonic() + deadline
    while left and time.monotonic() < end:
        signal_worker(info, n, "STOP,KILL", left)
        time.sleep(0.05)
        left = find()
        seen |= left
    result.survived = sorted(left)
    result.killed = sorted(seen - left)
    return result


# --- the watchdog ------------------------------------------------------------------------------------


class Watchdog:
    """The controller's thread: every WATCH_INTERVAL it measures the workers, and a worker past a cap has
    every process of it killed at once (its agent too); the controller takes the breaches (`take`), fails
    the job and logs them. A disk breach also empties the worker's outbox (what it wrote)."""

    def __init__(self, run: RunFolder, info: RunInfo, workers: list[int]) -> None:
        self.run, self.info, self.workers = run, info, workers
        self._found: list[tuple[Breach, list[int]]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._disk: dict[int, int] = dict.fromkeys(workers, 0)
        self._seen: dict[int, set[int]] | None = None
        self._folder: int | None = None

    @property
    def active(self) -> bool:
        caps = self.info.caps
        return any(v is not None for v in (caps.pids, caps.memory, caps.disk, caps.run_folder))

    def start(self) -> None:
        if not self.active or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="orch-watchdog", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def take(self) -> list[tuple[Breach, list[int]]]:
        """The breaches found since the last call, each with the pids killed."""
        with self._lock:
            found, self._found = self._found, []
        return found

    def _loop(self) -> None:
        looks = 0
        while not self._stop.wait(WATCH_INTERVAL):
            try:
                self.check(disk=looks % DISK_EVERY == 0)
            except (OSError, SandboxError) as exc:  # never let a look end the watch
                log.warning("run %s: the caps watchdog could not look: %s", self.run.name, exc)
            looks += 1

    def check(self, disk: bool = True) -> list[Breach]:
        """One look: measure, and stop every worker past a cap. The breaches found."""
        procs = processes_by_worker(self.run, self.info, self.workers)
        if disk:
            self._disk, self._folder = measure_disk(self.run, self.info, self.workers)
        usage = {}
        seen, self._seen = self._seen, procs
        for n in self.workers:
            proc = measure_processes(procs[n])
            new = len(procs[n] - seen[n]) if seen is not None else 0  # the first look has nothing to compare
            usage[n] = Usage(tasks=proc.tasks, memory=proc.memory, disk=self._disk.get(n, 0), spawned=new)
        found = breaches(self.info.caps, usage, self._folder)
        for breach in found:
            killed = self.stop_worker(breach, procs[breach.worker])
            with self._lock:
                self._found.append((breach, killed))
            if breach.cap in ("disk", "run-folder"):
                self._disk[breach.worker] = 0
                self._folder = None  # walked again on the next look that walks
        return found

    def stop_worker(self, breach: Breach, pids: set[int]) -> list[int]:
        n = breach.worker
        clear = self.run.outbox(n) if breach.cap in ("disk", "run-folder") else None
        if own_uids(self.info):
            signal_worker(self.info, n, "STOP,KILL", None, clear)  # kill(-1) as the worker: every process
            if clear is not None and _in_container():  # its own files in /tmp too (sticky: only its own)
                signal_worker(self.info, n, "CONT", [], Path("/tmp"))
        else:
            signal_worker(self.info, n, "STOP,KILL", pids)
            if clear is not None:
                for entry in clear.iterdir():
                    _remove(entry)
        return sorted(pids)


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()

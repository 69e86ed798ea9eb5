"""The caps watchdog: the controller's thread that holds each worker to the caps no kernel limit holds
here (orch.fleet.caps, SECURITY.md "Caps"). Every WATCH_INTERVAL it looks at the workers' processes
(orch.fleet.workerprocs: only what started since the last look is read to learn whose it is), and every
DISK_EVERY looks it walks what they wrote (orch.fleet.diskuse); a worker past a cap has every process of
it killed at once (its agent too)."""

from __future__ import annotations

import logging
import threading

from orch import procs
from orch.errors import SandboxError
from orch.fleet.caps import DISK_CAPS, WATCH_INTERVAL, Breach, Usage, breaches
from orch.fleet.confinement import Confinement
from orch.fleet.diskuse import measure_disk
from orch.fleet.workerprocs import WorkerProcesses
from orch.run.folder import RunFolder
from orch.run.records import RunInfo

log = logging.getLogger(__name__)

DISK_EVERY = 4
"""Every this many looks the watchdog also walks the run folder (files cost more than processes)."""


class Watchdog:
    """The controller takes the breaches (`take`), fails the job and logs them. A disk breach also empties
    the worker's outbox (what it wrote)."""

    def __init__(self, run: RunFolder, info: RunInfo, workers: list[int], confinement: Confinement) -> None:
        self.run, self.info, self.workers, self.confinement = run, info, workers, confinement
        self.processes = WorkerProcesses(run, workers, confinement)
        self._found: list[tuple[Breach, list[int]]] = []
        self._stopping: set[int] = set()  # workers being stopped right now
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._disk: dict[int, int] = dict.fromkeys(workers, 0)
        self._files: dict[int, int] = dict.fromkeys(workers, 0)
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

    def stopping(self, n: int) -> bool:
        """Whether worker n is being stopped past a cap, or was and the controller has not taken it yet: a
        crash it sees now is the watchdog's kill, to be handled after over_caps() has failed its job."""
        with self._lock:
            return n in self._stopping or any(breach.worker == n for breach, _ in self._found)

    def take(self) -> list[tuple[Breach, list[int]]]:
        """The breaches found since the last call, each with the pids killed."""
        with self._lock:
            found, self._found = self._found, []
        return found

    def _loop(self) -> None:
        procs.name_thread("orch-watchdog")  # so top -H and the kernel's accounting tell it from its controller
        looks = 0
        while not self._stop.wait(WATCH_INTERVAL):
            try:
                self.check(disk=looks % DISK_EVERY == 0)
            except (OSError, SandboxError) as exc:  # never let a look end the watch
                log.warning("run %s: the caps watchdog could not look: %s", self.run.name, exc)
            looks += 1

    def check(self, disk: bool = True) -> list[Breach]:
        """One look: measure, and stop every worker past a cap. The breaches found."""
        found_procs = self.processes.look()
        if disk:
            look = measure_disk(self.run, self.workers, self.confinement, found_procs)
            self._disk, self._files, self._folder = look.written, look.files, look.folder
        usage = {}
        seen, self._seen = self._seen, found_procs
        each = self.processes.usage  # the look's own reads of them: none again here
        for n in self.workers:
            tasks = sum(each[pid].tasks for pid in found_procs[n])
            memory = sum(each[pid].memory for pid in found_procs[n])
            new = len(found_procs[n] - seen[n]) if seen is not None else 0  # the first look has nothing to compare
            written, files = self._disk.get(n, 0), self._files.get(n, 0)
            usage[n] = Usage(tasks=tasks, memory=memory, disk=written, spawned=new, files=files)
        found = breaches(self.info.caps, usage, self._folder)
        for breach in found:
            pids = found_procs[breach.worker]
            with self._lock:  # before the kill: the controller must not restart it onto its job meanwhile
                self._stopping.add(breach.worker)
            try:
                self.stop_worker(breach, pids)
            finally:  # after the kill: what the controller does about it (as the worker) comes after it
                with self._lock:
                    self._found.append((breach, sorted(pids)))
                    self._stopping.discard(breach.worker)
            if breach.cap in DISK_CAPS:
                self._disk[breach.worker] = self._files[breach.worker] = 0
                self._folder = None  # walked again on the next look that walks
        return found

    def stop_worker(self, breach: Breach, pids: set[int]) -> None:
        n = breach.worker
        clear = self.run.outbox(n) if breach.cap in DISK_CAPS else None
        self.confinement.stop_worker(self.info, n, pids, clear)

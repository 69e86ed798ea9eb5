"""Which live processes are which worker's, kept from one look to the next so that a look is cheap.

How a process is told apart is the run's confinement's (orch.fleet.confinement: `attribution`): by its uid, its
sandbox's pid namespace, or the state-file variable it inherited.

What a process is does not change while it lives (its uid: a worker has no capability; its namespace), so
each process is read once, when it is first seen, and again at each look while it is young (between fork and
exec, a pane's first process still wears its parent's uid and environment; on a loaded machine that can
take seconds, so "young" is a time, not a number of looks). A pid is read again when the
kernel may have handed it out since the last look: pids are handed out in order (orch.procs.last_pid), so
a look reads the processes started since the last one, and the workers' own processes to measure them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from orch import procs
from orch.fleet.confinement import Confinement
from orch.run.folder import RunFolder

YOUNG_S = 10.0
"""A process that is no worker's is read again at each look until it is this old (seconds since it started:
its exec or uid switch may still come; a pane's first process makes it within a second, or a few on a
loaded machine)."""


class WorkerProcesses:
    """Each worker's live processes, look after look (`look`). One instance per watcher: it keeps what it
    read about each pid."""

    def __init__(self, run: RunFolder, workers: Iterable[int], confinement: Confinement) -> None:
        self.run, self.workers = run, sorted(set(workers))
        self.attribution = confinement.attribution(run, self.workers)
        self._owner: dict[int, int | None] = {}
        self._young: dict[int, float] = {}
        """pid: until when (seconds since the epoch) it is read again while it is no worker's."""
        self._last = -1
        self._top = procs.pid_max()
        self.read = 0
        """Processes read (classified) so far: what the cache saves shows here."""
        self.usage: dict[int, procs.Load] = {}
        """The last look's workers' processes: each one's tasks and memory (the watchdog measures with them)."""

    def look(self, workers: Iterable[int] | None = None) -> dict[int, set[int]]:
        """Each worker's processes now (of `workers` only, when given: the others are still kept)."""
        before = self._last
        live = procs.pids()
        after = procs.last_pid()  # read after listing: a pid handed out meanwhile is in (before, after]
        span = procs.reused_between(before, after, self._top)
        self.attribution.forget(set(live), span)
        owner: dict[int, int | None] = {}
        young: dict[int, float] = {}
        now = time.time()
        for pid in live:
            known = pid in self._owner and not procs.in_span(pid, span)
            if not known or self._young.get(pid, 0.0) > now:
                worker = self.attribution.owner(pid)
                owner[pid] = None if worker is procs.NOT_YET else worker
                self.read += 1
                if worker is procs.NOT_YET:
                    young[pid] = now + YOUNG_S  # inside its exec: its environment is not there to read yet
                elif worker is None:
                    until = self._young.get(pid) if known else (procs.started(pid) or 0.0) + YOUNG_S
                    if until is not None and until > now:
                        young[pid] = until
            else:
                owner[pid] = self._owner[pid]
        self._owner, self._young, self._last = owner, young, after
        found: dict[int, set[int]] = {n: set() for n in (self.workers if workers is None else workers)}
        # One read of each: whether it lives (a zombie has ended: nothing to stop or measure), and what it uses.
        self.usage = procs.usage(pid for pid, n in owner.items() if n in found)
        for pid, n in owner.items():
            if n in found and pid in self.usage:
                found[n].add(pid)
        return found


def processes_by_worker(run: RunFolder, workers: Iterable[int], confinement: Confinement) -> dict[int, set[int]]:
    """Each worker's live processes, read now (one look, nothing kept)."""
    return WorkerProcesses(run, workers, confinement).look()

"""Which live processes are which worker's, kept from one look to the next so that a look is cheap.

How a process is told apart depends on the run's isolation:

- a uid of its own (strict isolation in a container, orch.run.uids): the process's real uid;
- a bubblewrap sandbox of its own (local strict isolation, orch.backends.local.bwrap): the process's pid namespace,
  which it can never leave; a namespace belongs to the worker whose bwrap (its parent outside, a process
  no worker can start or change) binds that worker's outbox;
- shared isolation: the process inherited its supervisor's state-file variable (a process that clears its
  environment escapes this: SECURITY.md).

What a process is does not change while it lives (its uid: a worker has no capability; its namespace), so
each process is read once, when it is first seen, and again at each look while it is young (between fork and
exec, a pane's first process still wears its parent's uid and environment; on a loaded machine that can
take seconds, so "young" is a time, not a number of looks). A pid is read again when the
kernel may have handed it out since the last look: pids are handed out in order (orch.procs.last_pid), so
a look reads the processes started since the last one, and the workers' own processes to measure them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Literal

from orch import prereqs, procs, settings
from orch.backends.local import bwrap
from orch.fleet.caps import own_uids
from orch.run.folder import RunFolder
from orch.run.records import RunInfo
from orch.run.uids import worker_of

YOUNG_S = 10.0
"""A process that is no worker's is read again at each look until it is this old (seconds since it started:
its exec or uid switch may still come; a pane's first process makes it within a second, or a few on a
loaded machine)."""


class WorkerProcesses:
    """Each worker's live processes, look after look (`look`). One instance per watcher: it keeps what it
    read about each pid."""

    def __init__(self, run: RunFolder, info: RunInfo, workers: Iterable[int]) -> None:
        self.run, self.workers = run, sorted(set(workers))
        self.by_uid = own_uids(info)
        self.by_namespace = not self.by_uid and bwrap.sandboxed(info)
        self._owner: dict[int, int | None] = {}
        self._young: dict[int, float] = {}
        """pid: until when (seconds since the epoch) it is read again while it is no worker's."""
        self._last = -1
        self._top = procs.pid_max()
        self._host = procs.pid_namespace(os.getpid())
        self._sandboxes: dict[int, tuple[int | None, int]] = {}
        """pid namespace: (its worker, or None for another's sandbox; the bwrap process outside that made it)."""
        self._wanted = set(self.workers)
        self._marks = {str(run.state(n)): n for n in self.workers}
        self._outboxes = {str(run.outbox(n)): n for n in self.workers}
        found = prereqs.bwrap_path()
        self._bwrap = {"bwrap", *([found.name] if found is not None else [])}
        self.read = 0
        """Processes read (classified) so far: what the cache saves shows here."""

    def look(self) -> dict[int, set[int]]:
        """Each worker's processes now."""
        before = self._last
        live = procs.pids()
        after = procs.last_pid()  # read after listing: a pid handed out meanwhile is in (before, after]
        span = procs.reused_between(before, after, self._top)
        alive = set(live)
        for ns, (_, outer) in list(self._sandboxes.items()):
            if outer not in alive or procs.in_span(outer, span):
                del self._sandboxes[ns]  # its bwrap is gone: the namespace's inode may be handed out again
        owner: dict[int, int | None] = {}
        young: dict[int, float] = {}
        now = time.time()
        for pid in live:
            known = pid in self._owner and not procs.in_span(pid, span)
            if not known or self._young.get(pid, 0.0) > now:
                worker = self._classify(pid)
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
        found: dict[int, set[int]] = {n: set() for n in self.workers}
        for pid, n in owner.items():
            if n is not None and procs.alive(pid):  # a zombie has ended: nothing to stop or measure
                found[n].add(pid)
        return found

    def _classify(self, pid: int) -> int | Literal[procs.Unsettled.NOT_YET] | None:
        if self.by_uid:
            uid = procs.uid(pid)
            n = worker_of(uid) if uid is not None else None
            return n if n in self._wanted else None
        if self.by_namespace:
            return self._sandbox_worker(pid)
        mark = procs.env_var(pid, settings.STATE_FILE.name)
        return mark if mark is procs.NOT_YET else self._marks.get(mark) if mark is not None else None

    def _sandbox_worker(self, pid: int) -> int | None:
        """The worker whose sandbox pid runs in: its namespace's, found once per namespace by walking up to
        the first ancestor outside every worker's sandbox (a sandbox inside a sandbox, as Codex makes its
        own, is its worker's too)."""
        ns = procs.pid_namespace(pid)
        if ns is None or ns == self._host:
            return None
        if ns in self._sandboxes:
            return self._sandboxes[ns][0]
        chain = procs.ancestry(pid) or []
        for parent in chain[1:]:
            outer = procs.pid_namespace(parent)
            if outer in self._sandboxes:
                self._sandboxes[ns] = (self._sandboxes[outer][0], self._sandboxes[outer][1])
                return self._sandboxes[ns][0]
            if outer == self._host:
                n = self._bwrap_worker(parent)
                self._sandboxes[ns] = (n, parent)
                return n
        return None

    def _bwrap_worker(self, pid: int) -> int | None:
        """The worker whose sandbox this bwrap process (outside every sandbox) made: the one whose outbox it
        binds writable."""
        argv = procs.cmdline(pid)
        if not argv or os.path.basename(argv[0]) not in self._bwrap:
            return None
        for i, arg in enumerate(argv[:-2]):
            if arg == "--bind" and argv[i + 1] == argv[i + 2] and argv[i + 1] in self._outboxes:
                return self._outboxes[argv[i + 1]]
        return None


def processes_by_worker(run: RunFolder, info: RunInfo, workers: Iterable[int]) -> dict[int, set[int]]:
    """Each worker's live processes, read now (one look, nothing kept)."""
    return WorkerProcesses(run, info, workers).look()

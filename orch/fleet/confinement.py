"""Confinement: how a run's workers are kept apart on the machine of its tmux server, as a type.

Three kinds, chosen per run by its backend (orch.backends.base.Backend.confinement), never re-derived from flags:

- `Shared` (here): the workers share the controller's uid; a process is a worker's when it inherited that
  worker's state-file variable (orch.fleet.supervisor.supervised sets it; a process that clears its environment
  escapes this: SECURITY.md);
- Bubblewrap (orch.backends.local.confinement): on a host, each worker's pane in a bubblewrap sandbox of its own, all of
  the user's uid; a process is the worker's whose sandbox's pid namespace it runs in;
- OwnUid (orch.backends.local.confinement): in a run's container, each worker a uid of its own (orch.run.uids); a
  process is the worker's whose uid it has.

Each gives the pane's argv (its wrapper around the agent), how a process is attributed to a worker, how a
worker's processes are stopped, and what it runs beside the fleet (the relay of the workers' sockets). The fleet
(launch, the watchdog, the stray check) takes the run's confinement from its caller and asks it; it never asks
which backend or isolation a run has.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from orch import procs
from orch.contracts import AgentAdapter, LaunchSpec, WorkerContext
from orch.fleet import caps
from orch.fleet.stopping import remove_contents
from orch.fleet.supervisor import supervised
from orch.run.folder import RunFolder
from orch.run.records import RunInfo
from orch.settings.internal import STATE_FILE

Owner = int | Literal[procs.Unsettled.NOT_YET] | None
"""A process's worker, NOT_YET while it is inside its exec (its environment not laid out yet), None for no worker's."""


class Attribution(Protocol):
    """Whose each process is, as one confinement tells them apart (orch.fleet.workerprocs keeps what it read)."""

    def owner(self, pid: int) -> Owner:
        """The worker whose process `pid` is (read once while the process lives, and again while it is young)."""
        ...

    def forget(self, alive: set[int], span: range | tuple[range, range] | None) -> None:
        """Drop what gone processes told (`alive`: the pids now; `span`: pids handed out again since the last look)."""
        ...


class Confinement(Protocol):
    """How one run's workers are kept apart where its tmux server runs."""

    @property
    def name(self) -> str:
        """`shared`, `bubblewrap` or `own-uid`."""
        ...

    @property
    def own_uids(self) -> bool:
        """Each worker runs as a uid of its own: its RLIMIT_NPROC is its alone, a file's owner says whose it is, and
        the controller may not signal it (a helper started as the worker does)."""
        ...

    @property
    def boxed(self) -> bool:
        """orch's boundary encloses the worker (a run's container, or its own sandbox): an agent's own sandbox
        cannot make its namespaces inside it, and is off (WorkerContext.boxed)."""
        ...

    def check(self, info: RunInfo) -> None:
        """Refuse in one line, before anything is made, a run it cannot confine here."""
        ...

    def prepare(self, run: RunFolder, info: RunInfo) -> None:
        """Before any worker starts: what its panes bind or need."""
        ...

    def pane_socket(self, run: RunFolder, adapter: AgentAdapter, n: int) -> Path | None:
        """Where an `own_pane` agent's helper reaches worker n's own pane (WorkerContext.pane_socket); None: the
        tmux server, as the controller does."""
        ...

    def pane(
        self, run: RunFolder, info: RunInfo, adapter: AgentAdapter, ctx: WorkerContext, own: dict[str, str]
    ) -> LaunchSpec:
        """Worker n's pane (ctx.worker): its config dir seeded (by the adapter's `prepare`, here or as the worker)
        and the agent's argv wrapped in this confinement, its caps and the exit-status supervisor. `own`: the
        worker's own variables (its gateway URL and token)."""
        ...

    def needs_relay(self, info: RunInfo) -> bool:
        """Whether its workers need the relay of their sockets (orch.backends.local.relay) beside the fleet."""
        ...

    def ensure_relay(self, run: RunFolder, info: RunInfo, gateway_url: str) -> bool:
        """The relay running if its workers need one, started again if it died; True when it had to be started."""
        ...

    def relay_running(self, run: RunFolder) -> bool: ...

    def stop(self, run: RunFolder) -> None:
        """What it runs beside the fleet, stopped (the fleet is gone or going)."""
        ...

    def attribution(self, run: RunFolder, workers: Iterable[int]) -> Attribution:
        """How a process is told to be one of these workers'."""
        ...

    def agent_tree(self, pane_pid: int) -> tuple[int | None, set[int]]:
        """The root of the agent's process tree under a pane's first process, and the processes between that are
        the confinement itself (a sandbox's own init: never a worker's strays)."""
        ...

    def signal(self, info: RunInfo, n: int, signals: str, pids: Iterable[int]) -> None:
        """Send `signals` (comma-separated names: TERM,CONT) to these processes of worker n."""
        ...

    def stop_worker(self, info: RunInfo, n: int, pids: set[int], clear: Path | None) -> None:
        """Kill every process of worker n (`pids`: those found), and with `clear` empty that folder of its (its
        outbox) and what else it wrote where no walk of the run folder reaches (`scratch`)."""
        ...

    def scratch(self) -> list[Path]:
        """Where its workers write beyond the run folder, measured by the disk walk (a file's owner tells whose)."""
        ...


def state_file_owner(marks: dict[str, int], pid: int) -> Owner:
    """Shared isolation's attribution: the worker whose state-file variable the process inherited."""
    mark = procs.env_var(pid, STATE_FILE.name)
    return mark if mark is procs.NOT_YET else marks.get(mark) if mark is not None else None


@dataclass(frozen=True)
class ByStateFile:
    """Attribution by the state-file variable each pane's supervisor sets (orch.fleet.supervisor.supervised)."""

    marks: dict[str, int]

    def owner(self, pid: int) -> Owner:
        return state_file_owner(self.marks, pid)

    def forget(self, alive: set[int], span: range | tuple[range, range] | None) -> None:
        return None


def kill_pids(signals: str, pids: Iterable[int]) -> None:
    """Signal processes of this uid, each signal in turn (one gone meanwhile is no error)."""
    targets = sorted(pids)
    for name in signals.split(","):
        for pid in targets:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.Signals["SIG" + name])


@dataclass(frozen=True)
class Shared:
    """The workers share the controller's uid: no sandbox, nothing beside the fleet. `boxed`: in a run's container,
    whose boundary is theirs too."""

    boxed: bool = False
    name: str = "shared"
    own_uids: bool = False

    def check(self, info: RunInfo) -> None:
        return None

    def prepare(self, run: RunFolder, info: RunInfo) -> None:
        return None

    def pane_socket(self, run: RunFolder, adapter: AgentAdapter, n: int) -> Path | None:
        return None

    def pane(
        self, run: RunFolder, info: RunInfo, adapter: AgentAdapter, ctx: WorkerContext, own: dict[str, str]
    ) -> LaunchSpec:
        spec = adapter.prepare(ctx)
        limits = caps.limit_argv(info.caps, False, info.workers)
        return supervised(LaunchSpec([*limits, *spec.argv], {**spec.env, **own}, spec.cwd), run, ctx.worker)

    def needs_relay(self, info: RunInfo) -> bool:
        return False

    def ensure_relay(self, run: RunFolder, info: RunInfo, gateway_url: str) -> bool:
        return False

    def relay_running(self, run: RunFolder) -> bool:
        return False

    def stop(self, run: RunFolder) -> None:
        return None

    def attribution(self, run: RunFolder, workers: Iterable[int]) -> Attribution:
        return ByStateFile({str(run.state(n)): n for n in workers})

    def agent_tree(self, pane_pid: int) -> tuple[int | None, set[int]]:
        return pane_pid, set()

    def signal(self, info: RunInfo, n: int, signals: str, pids: Iterable[int]) -> None:
        kill_pids(signals, pids)

    def stop_worker(self, info: RunInfo, n: int, pids: set[int], clear: Path | None) -> None:
        kill_pids("STOP,KILL", pids)
        if clear is not None:
            remove_contents(clear)

    def scratch(self) -> list[Path]:
        return []

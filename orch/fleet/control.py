"""A fleet on this machine: its status, done-flag waits and teardown (`orch status`, `orch wait`, `orch kill`)."""

from __future__ import annotations

import getpass
import logging
import os
import shutil
import time
from collections.abc import Iterable

from orch import signals
from orch.errors import WaitTimeoutError
from orch.fleet import rungateway
from orch.fleet.confinement import Confinement
from orch.fleet.launch import server_for, worker_processes
from orch.fleet.tmux import PaneInfo
from orch.fleet.workerstate import derive_state, final_state
from orch.gateway.modeldir import UsageSnapshot, read_usage, run_cost
from orch.run import bus
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent, RunInfo, RunStatus, WorkerState
from orch.run.statusview import RunStatusView, WorkerStatus
from orch.text import join_numbers
from orch.waits import wait_for_paths, wait_until

log = logging.getLogger(__name__)

KILL_TIMEOUT = 10.0  # seconds for killed agents to run their exit hooks


STOPPED = (RunStatus.STOPPED, RunStatus.FAILED)
"""A run in one of these was stopped (its fleet torn down): its folder says all there is, no tmux is asked."""


def status(run: RunFolder) -> RunStatusView:
    info = run.info()
    if info.status in STOPPED:
        return status_view(run, info, panes=None)
    server = server_for(info)
    if not server.alive():
        return status_view(run, info, panes=None, why_down="tmux server not running")
    return status_view(run, info, panes=server.panes())


def status_view(
    run: RunFolder, info: RunInfo, panes: dict[int, PaneInfo] | None, why_down: str | None = None
) -> RunStatusView:
    """The status table; `panes=None` means the run's tmux server (or container) is gone: `why_down` says why,
    where the run was not stopped (its workers exited with it, which needs no saying)."""
    usage = read_usage(run)
    rows = []
    for n in range(1, info.workers + 1):
        detail: str | None
        if panes is None and why_down is not None:
            state, detail = WorkerState.EXITED, why_down
        elif panes is None:
            state, detail = final_state(run.last_hook_event(n))
        else:
            state, detail = derive_state(run.last_hook_event(n), panes.get(n))
        counted = usage.workers.get(n) if usage is not None else None
        rows.append(
            WorkerStatus(
                worker=n,
                agent=info.agent_of(n),
                state=state,
                detail=detail,
                done=run.done(n).exists(),
                result=run.result(n).exists(),
                last_bus=bus.last_line_of(run, n),
                cost_usd=_cost(run, n, usage),
                rate_limited_until=counted.rate_limited_until if counted else None,
                pane_id=panes[n].pane_id if panes and n in panes else None,
            )
        )
    cost, unbilled = run_cost(usage, (r.cost_usd for r in rows), info.offline, info.replay is not None)
    return RunStatusView(
        name=info.name,
        backend=info.backend,
        agent="+".join(info.agents()),
        status=info.status,
        alive=panes is not None,
        workers=rows,
        started=info.created,
        cost_usd=cost,
        billed=usage.billed if usage is not None else None,
        unbilled=unbilled,
    )


def _cost(run: RunFolder, n: int, usage: UsageSnapshot | None) -> float | None:
    if usage is not None:
        counted = usage.workers.get(n)
        return counted.cost_usd if counted else 0.0
    line = run.status_line_info(n)
    return line.cost_usd if line else None


def wait(run: RunFolder, workers: Iterable[int] | None, timeout: float | None) -> None:
    """Return as soon as the done flags exist (inotify); WaitTimeoutError naming who is missing."""
    info = run.info()
    chosen = sorted(set(workers)) if workers else list(range(1, info.workers + 1))
    for n in chosen:
        run.check_worker(n)
    missing = wait_for_paths([run.done(n) for n in chosen], timeout)
    if missing:
        late = [n for n in chosen if run.done(n) in missing]
        raise WaitTimeoutError(f"timed out after {timeout:g}s; no done flag from workers {join_numbers(late)}")


def kill(run: RunFolder, confinement: Confinement) -> None:
    """Stop the tmux server and what its `confinement` runs beside it; keep the run folder (transcripts are
    evidence); drop config dirs. Whole: a signal that comes meanwhile is acted on after it (orch.signals)."""
    with signals.held():
        _kill(run, confinement)


def _kill(run: RunFolder, confinement: Confinement) -> None:
    info = run.info()
    server_for(info).kill()
    # Agents outlive their pane's shell to run their exit hooks: wait for every process of the fleet
    # (not just the shells), so none writes into a run that `up --replace` recreates at the same path.
    try:
        wait_until(lambda: not worker_processes(run, info.workers, confinement), KILL_TIMEOUT, "the agents to exit")
    except WaitTimeoutError:
        log.warning("run %s: some agent processes are still exiting", run.name)
    rungateway.stop(info.name)
    confinement.stop(run)
    shutil.rmtree(run.config_root, ignore_errors=True)
    info.status = RunStatus.STOPPED
    run.write_info(info)
    run.log_event(ControllerEvent(event=Event.KILLED, data={"by": _whoami(), "at": time.time()}))


def _whoami() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())

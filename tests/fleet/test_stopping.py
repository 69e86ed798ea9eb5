"""Stopping a worker's leftover processes (orch/fleet/stopping.py) on real processes of this machine."""

from __future__ import annotations

from orch.backends.registry import confinement_of
from orch.fleet import stopping
from orch.fleet.workerprocs import WorkerProcesses, processes_by_worker
from orch.run.folder import RunFolder
from orch.waits import wait_until
from tests.fleet.test_watchdog import as_worker, run

__all__ = ["run"]  # the capped run, a fixture


def test_a_process_bomb_is_stopped_even_as_it_respawns(run: RunFolder) -> None:
    """A stray that keeps forking (bounded, so as not to harm the machine) and ignores SIGTERM: frozen and
    killed round by round until none is left."""
    bomb = as_worker(
        run,
        1,
        "import os, signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "for _ in range(6):\n    os.fork()\n    time.sleep(0.05)\ntime.sleep(120)",
    )
    info = run.info()
    confinement = confinement_of(info)
    wait_until(lambda: len(processes_by_worker(run, [1], confinement)[1]) >= 32, 20, "the bomb to spread")
    watcher = WorkerProcesses(run, [1], confinement)
    stopped = stopping.stop(confinement, info, 1, lambda: watcher.look()[1], grace=0.3)
    assert stopped.survived == [] and len(stopped.killed) >= 32
    assert bomb.wait(timeout=10) != 0

"""Launching a fleet on a real tmux server, with orch's own scripted agent in the panes: `orch up` (its
private server, its windows, a name taken), a worker restarted."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from orch.backends.registry import confinement_of
from orch.errors import SandboxError
from orch.fleet import control, launch
from orch.run.folder import RunFolder
from orch.run.records import WorkerState
from orch.run.terminal import WINDOW_SIZE, pane_sizes
from orch.waits import wait_until
from tests.helpers import orch, prompts


def test_up_creates_folder_private_server_and_idle_workers(run3: RunFolder) -> None:
    info = run3.info()
    assert info.workers == 3 and info.status.value == "running"
    for sub in ("bus.md", "state", "logs", "outbox", "events.jsonl"):
        assert (run3.root / sub).exists(), sub
    for unused in ("findings", "verdicts", "jobs", "worktrees", "changes"):  # an `orch run`'s, a writer run's
        assert not (run3.root / unused).exists(), unused
    # Each pane's size once all are tiled: what a stopped worker's log is rendered at.
    sizes = pane_sizes(run3)
    assert sorted(sizes) == [1, 2, 3] and all(
        0 < w <= WINDOW_SIZE[0] and 0 < h < WINDOW_SIZE[1] for w, h in sizes.values()
    )
    assert sum(w * h for w, h in sizes.values()) < WINDOW_SIZE[0] * WINDOW_SIZE[1]  # tiled: none has the window
    view = control.status(run3)
    assert [w.state for w in view.workers] == [WorkerState.IDLE] * 3
    assert len({w.pane_id for w in view.workers}) == 3
    # Never the user's default tmux server.
    assert launch.server_for(info).socket_name == "orch-r3"


def test_up_refuses_existing_run_unless_replace(run3: RunFolder, workdir: Path) -> None:
    again = orch("up", "r3", "-n", "1", "--agent", "scripted", "--workdir", workdir, "--local")
    assert again.exit_code == 2 and "already exists" in again.output
    replaced = orch("up", "r3", "-n", "1", "--agent", "scripted", "--workdir", workdir, "--local", "--replace")
    assert replaced.exit_code == 0, replaced.output
    assert RunFolder.for_name("r3").info().workers == 1


def test_eight_workers_use_two_windows(workdir: Path) -> None:
    assert orch("up", "r8", "-n", "8", "--agent", "scripted", "--workdir", workdir, "--local").exit_code == 0
    panes = launch.server_for(RunFolder.for_name("r8").info()).panes()
    assert sorted(panes) == list(range(1, 9))
    assert len({p.window for p in panes.values()}) == 2


def test_restart_brings_a_crashed_worker_back(run3: RunFolder) -> None:
    server = launch.server_for(run3.info())
    pid = launch.agent_pid(server.pane(2))
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: control.status(run3).workers[1].state is WorkerState.CRASHED, 10, "worker 2 to crash")
    # A file where the controller seeds a folder (the worker may write its own config dir): one error, no crash.
    home = run3.config_dir(2) / "home"
    shutil.rmtree(home)
    home.write_text("planted")
    with pytest.raises(SandboxError, match="config dir cannot be prepared"):
        launch.restart(run3, 2, confinement_of(run3.info()))
    home.unlink()
    launch.restart(run3, 2, confinement_of(run3.info()))
    wait_until(lambda: control.status(run3).workers[1].state is WorkerState.IDLE, 10, "worker 2 to come back")
    assert orch("send", "r3", "2", "after restart").exit_code == 0
    assert prompts(run3, 2)[-1] == "after restart"

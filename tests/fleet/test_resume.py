"""`orch up NAME --resume` on a local run whose tmux server died: relaunched on the same folder."""

from __future__ import annotations

from pathlib import Path

from orch.fleet import launch, watch
from orch.run.folder import RunFolder
from orch.run.records import RunStatus, WorkerState
from tests.helpers import orch


def test_local_resume_relaunches_on_the_same_folder(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    assert orch("up", "lr", "-n", "2", "--agent", "scripted", "--workdir", workdir, "--local").exit_code == 0
    run = RunFolder.for_name("lr")
    assert orch("bus", "post", "lr", "before the crash").exit_code == 0
    result = orch("up", "lr", "--resume")
    assert result.exit_code == 2 and "still running" in result.output
    launch.server_for(run.info()).kill()  # the tmux server dies under the run
    assert not watch.status(run).alive
    result = orch("up", "lr", "--resume")
    assert result.exit_code == 0, result.output
    view = watch.status(run)
    assert view.alive and [w.state for w in view.workers] == [WorkerState.IDLE] * 2
    assert run.info().status is RunStatus.RUNNING and "before the crash" in run.bus.read_text()
    starts = [e for e in run.hook_events(1) if e.hook_event_name == "SessionStart"]
    assert len(starts) == 2  # one per life of the run
    assert orch("kill", "lr").exit_code == 0

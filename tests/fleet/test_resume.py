"""`orch up NAME --resume` on a local run whose tmux server died: relaunched on the same folder."""

from __future__ import annotations

import sys
from pathlib import Path

from orch.fleet import control, launch
from orch.run.folder import RunFolder
from orch.run.records import RunStatus, WorkerState
from orch.waits import wait_until
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
    assert not control.status(run).alive
    result = orch("up", "lr", "--resume")
    assert result.exit_code == 0, result.output
    view = control.status(run)
    assert view.alive and [w.state for w in view.workers] == [WorkerState.IDLE] * 2
    assert run.info().status is RunStatus.RUNNING and "before the crash" in run.bus.read_text()
    starts = [e for e in run.hook_events(1) if e.hook_event_name == "SessionStart"]
    assert len(starts) == 2  # one per life of the run
    assert orch("kill", "lr").exit_code == 0


# A process of the first life that outlives its tmux server, as Claude Code does while it runs its
# SessionEnd hook after SIGHUP. It says it runs (past setsid: the tmux server's SIGHUP no longer reaches
# it); once the test starts the resume (the gate), it writes that SessionEnd as soon as a second life has
# started, or after 3 s if that life waits for it.
LINGERER = """
import sys
from pathlib import Path

Path(sys.argv[2]).touch()

from orch.errors import WaitTimeoutError
from orch.run.folder import RunFolder
from orch.run.hookwriter import append_event
from orch.waits import wait_until

run, gate = RunFolder.for_name("ll"), Path(sys.argv[1])
wait_until(gate.exists, 60, "the test to start the resume")
try:
    starts = lambda: sum(e.hook_event_name == "SessionStart" for e in run.hook_events(1))
    wait_until(lambda: starts() > 1, 3, "a second life to start")
except WaitTimeoutError:
    pass
append_event(str(run.state(1)), {"hook_event_name": "SessionEnd", "reason": "other"})
"""


def test_resume_waits_for_the_dead_fleets_agents(tmp_path: Path) -> None:
    """An agent of the dead fleet still runs its exit hooks: resume waits for it, so its late SessionEnd
    lands before the new life's SessionStart and does not read as the new life ending."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    # Shared: in a strict sandbox nothing outlives its pane (its pid namespace goes with it).
    up = orch("up", "ll", "--agent", "scripted", "--workdir", workdir, "--local", "--isolation", "shared")
    assert up.exit_code == 0
    run = RunFolder.for_name("ll")
    lingerer = tmp_path / "linger.py"
    lingerer.write_text(LINGERER)
    gate, running = tmp_path / "resuming", tmp_path / "lingering"
    command = f"$ setsid {sys.executable} {lingerer} {gate} {running} >/dev/null 2>&1 &"
    assert orch("send", "ll", "1", command).exit_code == 0
    # Not the tool call's PostToolUse: the backgrounded child may not have left the pane's session yet
    # (under load), and the server's death would take it along.
    wait_until(running.exists, 20, "the lingerer to run in its own session")
    launch.server_for(run.info()).kill()
    gate.touch()
    assert orch("up", "ll", "--resume").exit_code == 0
    ended = lambda: any(e.hook_event_name == "SessionEnd" for e in run.hook_events(1))  # noqa: E731
    wait_until(ended, 20, "the first life's late SessionEnd")
    assert [w.state for w in control.status(run).workers] == [WorkerState.IDLE]
    assert orch("kill", "ll").exit_code == 0

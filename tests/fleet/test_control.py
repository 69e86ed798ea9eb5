"""A fleet's status, wait and kill on a real tmux server, with orch's own scripted agent in the panes."""

from __future__ import annotations

import json
import os
import signal

import pytest

from orch.fleet import control, launch
from orch.run.folder import RunFolder
from orch.run.records import WorkerState
from orch.waits import wait_until
from tests.helpers import orch


def test_wait_times_out_naming_missing_workers(run3: RunFolder) -> None:
    run3.done(2).touch()
    result = orch("wait", "r3", "--timeout", "0.3")
    assert result.exit_code == 3
    assert "workers 1, 3" in result.output


def test_wait_returns_when_flags_appear(run3: RunFolder) -> None:
    for n in (1, 2, 3):
        assert orch("send", "r3", str(n), f"$ touch {run3.done(n)}").exit_code == 0
    assert orch("wait", "r3", "--timeout", "20").exit_code == 0


@pytest.mark.parametrize(
    ("how", "state", "detail"),
    [("exit", WorkerState.CRASHED, "exit status 3"), ("sigkill", WorkerState.CRASHED, "signal 9")],
    ids=["nonzero-exit", "sigkill"],
)
def test_crash_is_visible_and_pane_stays(run3: RunFolder, how: str, state: WorkerState, detail: str) -> None:
    server = launch.server_for(run3.info())
    if how == "exit":
        pane_id = server.pane(3).pane_id
        server.paste(pane_id, "/crash")
        server.send_keys(pane_id, "Enter")
    else:
        pid = launch.agent_pid(server.pane(3))
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
    row = wait_until(
        lambda: next((w for w in control.status(run3).workers if w.worker == 3 and w.state is state), None),
        10,
        "worker 3 to show as crashed",
    )
    assert row.detail is not None and detail in row.detail
    assert server.pane(3).pane_id  # remain-on-exit keeps the pane (and its last screen) for inspection
    result = orch("send", "r3", "3", "hello")
    assert result.exit_code == 1 and "not running" in result.output


def test_kill_keeps_transcripts_and_folder(run3: RunFolder) -> None:
    assert orch("send", "r3", "1", "$ echo transcript-marker").exit_code == 0
    wait_until(lambda: "transcript-marker" in run3.log(1).read_text(errors="replace"), 10, "the transcript")
    assert orch("kill", "r3").exit_code == 0
    assert not launch.server_for(run3.info()).alive()
    assert "transcript-marker" in run3.log(1).read_text(errors="replace")
    assert run3.info().status.value == "stopped"
    assert "transcript-marker" in orch("read", "r3", "1").output  # read falls back to the transcript
    # Each worker's final state: what it was doing when the run ended, never a pane that is gone.
    assert {(w.state, w.detail) for w in control.status(run3).workers} == {
        (WorkerState.EXITED, "idle when the run ended")
    }


def test_status_json_and_ls(run3: RunFolder) -> None:
    result = orch("status", "r3", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["schema_version"] == 1
    (run,) = data["runs"]
    assert run["name"] == "r3" and len(run["workers"]) == 3 and run["alive"] and run["outcome"] is None
    assert "r3" in orch("ls").output

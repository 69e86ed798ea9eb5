"""The fleet core on a real tmux server, with orch's own scripted agent in the panes."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from orch.fleet import control, launch
from orch.run import workerprotocol
from orch.run.folder import RunFolder
from orch.run.records import WorkerState
from orch.waits import wait_until
from tests.helpers import orch, prompts


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def run3(workdir: Path) -> RunFolder:
    result = orch("up", "r3", "-n", "3", "--agent", "scripted", "--workdir", workdir, "--local")
    assert result.exit_code == 0, result.output
    return RunFolder.for_name("r3")


def test_up_creates_folder_private_server_and_idle_workers(run3: RunFolder) -> None:
    info = run3.info()
    assert info.workers == 3 and info.status.value == "running"
    for sub in ("bus.md", "state", "logs", "findings", "verdicts", "events.jsonl"):
        assert (run3.root / sub).exists(), sub
    view = control.status(run3)
    assert [w.state for w in view.workers] == [WorkerState.IDLE] * 3
    assert len({w.pane_id for w in view.workers}) == 3
    # Never the user's default tmux server.
    assert launch.server_for(info).socket_name == "orch-r3"


def test_multiline_send_is_one_submission(run3: RunFolder) -> None:
    text = "\n".join(f"line {i}: some text with 'quotes' and $dollars" for i in range(1, 31))
    result = orch("send", "r3", "2", "--file", "-", input=text)
    assert result.exit_code == 0, result.output
    assert prompts(run3, 2) == [text]
    assert prompts(run3, 1) == [] and prompts(run3, 3) == []


def test_send_words_are_joined(run3: RunFolder) -> None:
    assert orch("send", "r3", "1", "hello", "there").exit_code == 0
    assert prompts(run3, 1) == ["hello there"]


def test_brief_writes_task_and_worker_follows_it(run3: RunFolder, tmp_path: Path) -> None:
    brief = tmp_path / "brief.md"
    brief.write_text(
        "Say hello on the bus, write a result, then finish.\n"
        "$ orch bus post r3 --as 1 hello from one\n"
        f"$ echo done > {run3.result(1)}\n"
        f"$ touch {run3.done(1)}\n"
    )
    result = orch("brief", "r3", "1", brief)
    assert result.exit_code == 0, result.output
    task = run3.task(1).read_text()
    assert task.startswith("Say hello") and "Worker protocol" in task and str(run3.done(1)) in task
    assert prompts(run3, 1) == [workerprotocol.pointer_text(run3, 1)]
    assert orch("wait", "r3", "--workers", "1", "--timeout", "20").exit_code == 0
    row = control.status(run3).workers[0]
    assert row.done and row.result and row.last_bus is not None and row.last_bus.endswith("[W1] hello from one")


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


def test_status_json_and_ls(run3: RunFolder) -> None:
    result = orch("status", "r3", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data[0]["name"] == "r3" and len(data[0]["workers"]) == 3
    assert "r3" in orch("ls").output


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
    launch.restart(run3, 2)
    wait_until(lambda: control.status(run3).workers[1].state is WorkerState.IDLE, 10, "worker 2 to come back")
    assert orch("send", "r3", "2", "after restart").exit_code == 0
    assert prompts(run3, 2)[-1] == "after restart"

"""The fleet core with the real Claude Code binary, driven by the scripted model server."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from orch.agents.claude import has_conversation
from orch.backends.registry import confinement_of
from orch.fleet import control, launch, talk
from orch.offline.modelserver import ScriptedModelServer
from orch.run import workerprotocol
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import WorkerState
from orch.versions import CLAUDE_CODE_VERSION
from orch.waits import wait_until
from tests.helpers import diagnose, kill_agent, orch, prompts, user_endpoint, worker_brief

pytestmark = pytest.mark.claude
N = 3


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch, claude_bin: Path) -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        key = "sk-ant-orch-offline-test-key-0123456789"
        user_endpoint(monkeypatch, "claude", server.url, key, claude_bin, clear=["CLAUDE_CONFIG_DIR"])
        yield server


@pytest.fixture
def fleet3(model: ScriptedModelServer, tmp_path: Path) -> RunFolder:
    workdir = tmp_path / "brand-new-workdir"  # never trusted before: no dialog may appear
    workdir.mkdir()
    result = orch("up", "cc", "-n", str(N), "--workdir", workdir, "--local")
    assert result.exit_code == 0, result.output
    return RunFolder.for_name("cc")


def test_workers_boot_with_no_dialog(fleet3: RunFolder) -> None:
    view = control.status(fleet3)
    assert [w.state for w in view.workers] == [WorkerState.IDLE] * N
    events = [json.loads(line)["event"] for line in fleet3.events.read_text().splitlines()]
    assert Event.DIALOG_ANSWERED not in events, "a first-run dialog appeared"
    for n in range(1, N + 1):
        screen = orch("read", "cc", str(n)).output
        assert "trust" not in screen.lower() and "No, exit" not in screen
    # In its sandbox (local strict isolation) its hooks are posts to its relay, but SessionStart and SessionEnd
    # (orch.agents.claude.COMMAND_HOOKS); the idle state above came through them.
    hooks = json.loads((fleet3.config_dir(1) / "settings.json").read_text())["hooks"]
    kinds = {event: entry[0]["hooks"][0]["type"] for event, entry in hooks.items()}
    assert kinds["Stop"] == kinds["PreToolUse"] == "http" and kinds["SessionStart"] == "command", kinds
    # Credentials never land in the run folder.
    for path in fleet3.root.rglob("*"):
        if path.is_file():
            assert "orch-offline-test-key" not in path.read_text(errors="replace"), path


def test_thirty_line_message_is_one_submission(fleet3: RunFolder) -> None:
    text = "\n".join(f"{i:02d}: a line of a long multi-line brief" for i in range(1, 31))
    assert orch("send", "cc", "2", "--file", "-", input=text).exit_code == 0
    (got,) = prompts(fleet3, 2)  # exactly one submission
    # Claude Code wraps a long paste in <pasted_content id=...>; every line arrives, in order.
    assert [line for line in got.splitlines() if line[:2].isdigit()] == text.splitlines()


def test_briefed_workers_post_write_and_finish(fleet3: RunFolder, model: ScriptedModelServer, tmp_path: Path) -> None:
    for n in range(1, N + 1):
        brief = tmp_path / f"brief-{n}.md"
        brief.write_text(worker_brief(fleet3, n))
        result = orch("brief", "cc", str(n), brief)
        assert result.exit_code == 0, result.output
    waited = orch("wait", "cc", "--timeout", "60")
    # Known flake, seen only late in full CI runs: one worker's first turn ends with StopFailure
    # model_not_found and no request ever reaches our model server (see the session notes). Re-point
    # such a worker once, and say so, rather than hide it.
    last = {n: fleet3.last_hook_event(n) for n in range(1, N + 1)}
    failed = [n for n, e in last.items() if e is not None and e.hook_event_name == "StopFailure"]
    for n in failed:
        print(f"worker {n} hit StopFailure ({last[n]}): re-pointing it once")
        talk.send(fleet3, n, workerprotocol.pointer_text(fleet3, n))
    if failed:
        waited = orch("wait", "cc", "--timeout", "60")
    requests = "\n".join(f"{r.path} stream={r.stream} step={r.step}" for r in model.requests)
    assert waited.exit_code == 0, f"{waited.output}{diagnose(fleet3)}\n--- model requests\n{requests}"
    bus_text = fleet3.bus.read_text()
    for n in range(1, N + 1):
        assert f"[W{n}] worker {n} checked in" in bus_text
        assert "all good" in fleet3.result(n).read_text()
        assert len(prompts(fleet3, n)) == (2 if n in failed else 1)  # the pointer arrived once
    view = control.status(fleet3)
    assert all(w.done and w.result for w in view.workers)


def test_killed_agent_shows_as_crashed_and_restarts_resumed(fleet3: RunFolder) -> None:
    assert orch("send", "cc", "1", "remember this conversation").exit_code == 0
    wait_until(lambda: control.status(fleet3).workers[0].state is WorkerState.IDLE, 30, "the turn to finish")
    session = fleet3.hook_events(1)[0].session_id
    assert session is not None
    # Claude Code writes its transcript asynchronously: a kill right after the turn may beat it.
    wait_until(lambda: has_conversation(fleet3.config_dir(1), session), 30, "the session transcript")
    kill_agent(fleet3, 1)
    # Restarted, it resumes the same Claude Code session.
    launch.restart(fleet3, 1, confinement_of(fleet3.info()))
    starts = wait_until(
        lambda: [e for e in fleet3.hook_events(1) if e.hook_event_name == "SessionStart"][1:], 30, "the resumed start"
    )
    assert starts[0].session_id == fleet3.hook_events(1)[0].session_id
    assert control.status(fleet3).workers[0].state is WorkerState.IDLE
    assert orch("kill", "cc").exit_code == 0
    assert fleet3.log(1).stat().st_size > 0  # the transcript outlives the run


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: checks Claude Code's refusal of bypass mode as root")
def test_bypass_mode_as_root_boots_with_a_warning(
    model: ScriptedModelServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    workdir = tmp_path / "w"
    workdir.mkdir()
    result = orch("up", "root", "--workdir", workdir, "--local", "--permission-mode", "bypassPermissions")
    assert result.exit_code == 0, result.output
    assert "bypass mode as root" in caplog.text
    assert control.status(RunFolder.for_name("root")).workers[0].state is WorkerState.IDLE


def test_doctor_reports_tools_and_credentials(model: ScriptedModelServer) -> None:
    result = orch("doctor")
    assert result.exit_code == 0, result.output
    lines = {line.split()[1]: line for line in result.output.splitlines() if line[:3] in ("ok ", "!! ", "-- ")}
    assert lines["tmux"].startswith("ok") and lines["claude"].startswith("ok")
    assert CLAUDE_CODE_VERSION in lines["claude"]
    assert "ANTHROPIC_API_KEY" in lines["credentials"] and "sk-ant" not in result.output


def test_permission_prompt_shows_as_waiting(model: ScriptedModelServer, tmp_path: Path) -> None:
    """A tool outside the allow list, in `default` mode: the worker waits on a real permission prompt."""
    workdir = tmp_path / "w"
    workdir.mkdir()
    assert orch("up", "perm", "--workdir", workdir, "--local", "--permission-mode", "default").exit_code == 0
    run = RunFolder.for_name("perm")
    fetch = {"tool": "WebFetch", "input": {"url": "http://127.0.0.1:9/", "prompt": "summarise"}}
    brief = tmp_path / "brief.md"
    brief.write_text(f"Fetch a page.\n\n```orch-script\n{json.dumps(fetch)}\n" + '{"reply": "done"}\n```\n')
    assert orch("brief", "perm", "1", brief).exit_code == 0

    def state() -> WorkerState:
        return control.status(run).workers[0].state

    wait_until(lambda: state() is WorkerState.WAITING_FOR_PERMISSION, 30, "the permission prompt", watch=run.state_dir)
    # The dialog is drawn a moment after the hook: the hook is the signal, the screen the evidence.
    wait_until(lambda: "Do you want to" in orch("read", "perm", "1").output, 10, "the dialog on screen")

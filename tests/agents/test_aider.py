"""The fleet core with the real aider, through the run's gateway to the scripted model (--offline).

aider has no hooks, no tool calls and no session id (orch/agents/aider.py): the tests check what orch
gets instead, and that it degrades as documented (no shell steps, no permission requests)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from orch.agents.aider import CACHE_BIN, SESSION
from orch.fleet import launch, watch
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import WorkerState
from orch.versions import AIDER_VERSION
from orch.waits import wait_until
from tests.helpers import diagnose, gateway_books, orch, prompts

pytestmark = pytest.mark.aider
BOOT = "120"


@pytest.fixture(autouse=True)
def aider_bin(monkeypatch: pytest.MonkeyPatch) -> Path:
    explicit = os.environ.get("ORCH_AIDER_BIN")
    path = Path(explicit) if explicit else CACHE_BIN
    if not path.exists():
        pytest.fail(f"aider {AIDER_VERSION} not found at {path}: run scripts/setup.sh")
    monkeypatch.setenv("ORCH_AIDER_BIN", str(path))
    for var in ("OPENAI_API_KEY", "OPENAI_API_BASE", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    return path


def up(name: str, tmp_path: Path, workers: int = 1) -> tuple[RunFolder, Path]:
    workdir = tmp_path / f"brand-new-{name}"
    workdir.mkdir()
    result = orch("up", name, "-n", str(workers), "-w", workdir, "--local", "--agent", "aider", "--offline",
                  "--boot-timeout", BOOT)  # fmt: skip
    assert result.exit_code == 0, result.output
    return RunFolder.for_name(name), workdir


def test_boots_with_no_dialog_takes_one_submission_and_writes_its_result(tmp_path: Path) -> None:
    run, workdir = up("ad", tmp_path, 2)
    assert [w.state for w in watch.status(run).workers] == [WorkerState.IDLE] * 2
    events = [json.loads(line)["event"] for line in run.events.read_text().splitlines()]
    assert Event.DIALOG_ANSWERED not in events
    screen = orch("read", "ad", "1").output
    assert "Aider v" in screen and "(Y)es/(N)o" not in screen and "raw.githubusercontent" not in screen
    assert list(workdir.iterdir()) == []  # no git repo made, no history files left in the user's tree

    text = "\n".join(f"{i:02d}: a line of a long multi-line brief" for i in range(1, 31))
    assert orch("send", "ad", "2", "--file", "-", input=text).exit_code == 0
    (got,) = prompts(run, 2)
    assert got.rstrip().splitlines() == text.splitlines()

    # Write steps become edit blocks aider applies: the result and the done flag (no shell: see the docs).
    steps = [
        {"write": str(run.result(1)), "content": "# Result of worker 1\nall good\n"},
        {"write": str(run.done(1)), "content": "done\n"},
        {"reply": "Finished."},
    ]
    script = "\n".join(json.dumps(s) for s in steps)
    brief = tmp_path / "brief.md"
    brief.write_text(
        "# Task\n\n" + "\n".join(f"Context {i}." for i in range(20)) + f"\n\n```orch-script\n{script}\n```\n"
    )
    assert orch("brief", "ad", "1", brief).exit_code == 0
    waited = orch("wait", "ad", "--timeout", "90", "--workers", "1")
    assert waited.exit_code == 0, waited.output + diagnose(run)
    assert "all good" in run.result(1).read_text()
    wait_until(lambda: watch.status(run).workers[0].state is WorkerState.IDLE, 30, "the end of worker 1's turn")
    gateway_books(run, lambda usage, ledger: usage["workers"].get("1", {}).get("requests", 0) >= 1)
    usage = json.loads(run.model_usage.read_text())
    assert usage["workers"]["1"]["requests"] >= 1 and "gpt-4.1" in usage["workers"]["1"]["by_model"]


def test_killed_aider_shows_as_crashed_and_restarts_with_its_chat_history(tmp_path: Path) -> None:
    run, _ = up("adk", tmp_path)
    assert orch("send", "adk", "1", "remember this conversation").exit_code == 0
    wait_until(lambda: any(e.hook_event_name == "Stop" for e in run.hook_events(1)), 60, "the turn to end")
    assert launch.last_session(run, 1) == SESSION
    pid = launch.agent_pid(launch.server_for(run.info()).pane(1))
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    row = wait_until(
        lambda: next((w for w in watch.status(run).workers if w.state is WorkerState.CRASHED), None),
        15,
        "worker 1 to show as crashed",
    )
    assert row.detail and "signal 9" in row.detail
    # Restarted with a prompt: aider has no flag for it, the watcher types it once aider is ready.
    launch.restart(run, 1, prompt="what did I ask you to remember?")
    wait_until(lambda: prompts(run, 1)[-1:] == ["what did I ask you to remember?"], 90, "the typed first prompt")
    wait_until(lambda: run.hook_events(1)[-1].hook_event_name == "Stop", 60, "the restored worker's turn")
    llm = (run.config_dir(1) / "history" / "llm.history").read_text()
    last_request = llm[llm.rindex("TO LLM") :]
    assert "remember this conversation" in last_request  # the chat history was restored
    assert orch("kill", "adk").exit_code == 0


def test_doctor_states_aiders_limits_and_bad_modes_are_refused(tmp_path: Path) -> None:
    doctor = orch("doctor").output
    assert AIDER_VERSION in doctor and "no hooks" in doctor and "no session id" in doctor
    workdir = tmp_path / "w"
    workdir.mkdir()
    result = orch("up", "bad", "-w", workdir, "--local", "--agent", "aider", "--offline", "--permission-mode", "ask")
    assert result.exit_code == 2 and "yes-always" in result.output

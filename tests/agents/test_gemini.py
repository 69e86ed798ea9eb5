"""The fleet core with the real Gemini CLI binary, through the run's gateway, driven by the scripted model."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from orch.backends.registry import confinement_of
from orch.fleet import control, launch
from orch.gateway.modeldir import Exchange
from orch.gateway.recording.exchanges import read_exchanges
from orch.gateway.recording.replay import Replayer
from orch.offline.modelserver import ScriptedModelServer, key_digest
from orch.run.events import Event
from orch.run.files import atomic_write
from orch.run.folder import RunFolder
from orch.run.records import Isolation, PermissionAnswer, WorkerState
from orch.versions import GEMINI_CLI_VERSION
from orch.waits import wait_until
from tests.helpers import diagnose, gateway_books, kill_agent, orch, orch_script, prompts, user_endpoint, worker_brief
from tests.hostile import pwned, tool_in_hostile_folder

pytestmark = pytest.mark.gemini
BRIEF_TOOLS = ["read_file", "run_shell_command", "write_file", "run_shell_command"]
N = 2
KEY = "AIza-orch-offline-gemini-test-key-0123456789"
OTHER_KEY = "AIza-orch-offline-google-api-key-9876543210"


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch, gemini_bin: Path) -> Iterator[ScriptedModelServer]:
    """The scripted model as the user's Gemini endpoint: the run's gateway forwards to it with KEY."""
    with ScriptedModelServer() as server:
        clear = ("GEMINI_CLI_HOME", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_GCA")
        user_endpoint(monkeypatch, "gemini", server.url, KEY, gemini_bin, clear)
        monkeypatch.setenv("GOOGLE_API_KEY", OTHER_KEY)  # a second credential: no worker may see it either
        yield server


def _up(name: str, workdir: Path, workers: int = N, *extra: str) -> RunFolder:
    result = orch("up", name, "-n", str(workers), "--workdir", workdir, "--local", "--agent", "gemini", *extra)
    assert result.exit_code == 0, result.output
    return RunFolder.for_name(name)


@pytest.fixture
def fleet(model: ScriptedModelServer, tmp_path: Path) -> RunFolder:
    workdir = tmp_path / "brand-new-workdir"  # never trusted before: no dialog may appear
    workdir.mkdir()
    return _up("gm", workdir)


def _webfetch_brief(tmp_path: Path) -> Path:
    """A brief whose one call, web_fetch, is outside the adapter's allow list: it asks."""
    fetch: dict[str, object] = {"tool": "web_fetch", "input": {"prompt": "summarise http://127.0.0.1:9/"}}
    brief = tmp_path / "fetch.md"
    brief.write_text("Fetch a page.\n\n" + orch_script(fetch, {"reply": "done"}))
    return brief


def test_workers_boot_with_no_dialog(fleet: RunFolder) -> None:
    view = control.status(fleet)
    assert [w.state for w in view.workers] == [WorkerState.IDLE] * N
    events = [json.loads(line)["event"] for line in fleet.events.read_text().splitlines()]
    assert Event.DIALOG_ANSWERED not in events, "a first-run dialog appeared"
    for n in range(1, N + 1):
        # Its SessionStart (what `up` waits for) can come before its first frame: a brief waits for that too.
        screen = wait_until(functools.partial(_prompt_drawn, n), 30, f"worker {n}'s prompt to be drawn")
        assert "Do you trust" not in screen and "authenticate" not in screen, screen
    # The key stays in the gateway: not in the run folder, not in any worker's environment.
    for path in fleet.root.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert KEY not in text and OTHER_KEY not in text, path
    server = launch.server_for(fleet.info())
    for n in range(1, N + 1):
        pid = launch.agent_pid(server.pane(n))
        assert pid is not None
        environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
        assert KEY not in environ and OTHER_KEY not in environ
        assert "GOOGLE_GEMINI_BASE_URL=http://127.0.0.1" in environ


def _prompt_drawn(n: int) -> str | None:
    screen = orch("read", "gm", str(n)).output
    return screen if "Type your message" in screen else None


def test_thirty_line_message_is_one_submission(fleet: RunFolder, model: ScriptedModelServer) -> None:
    text = "\n".join(f"{i:02d}: a line of a long multi-line brief" for i in range(1, 31))
    assert orch("send", "gm", "2", "--file", "-", input=text).exit_code == 0
    (got,) = prompts(fleet, 2)  # exactly one submission, every line in order
    assert [line for line in got.splitlines() if line[:2].isdigit()] == text.splitlines()
    wait_until(lambda: control.status(fleet).workers[1].state is WorkerState.IDLE, 30, "the turn to end")
    typed = [r.prompt for r in model.requests if r.prompt and r.prompt.startswith("01:")]
    assert typed and all(p == text for p in typed), typed  # the model got it whole, through the gateway


def test_briefed_workers_post_write_and_finish(fleet: RunFolder, model: ScriptedModelServer, tmp_path: Path) -> None:
    for n in range(1, N + 1):
        brief = tmp_path / f"brief-{n}.md"
        brief.write_text(worker_brief(fleet, n))
        result = orch("brief", "gm", str(n), brief)
        assert result.exit_code == 0, result.output
    waited = orch("wait", "gm", "--timeout", "90")
    requests = "\n".join(f"{r.path} stream={r.stream} step={r.step}" for r in model.requests)
    assert waited.exit_code == 0, f"{waited.output}{diagnose(fleet)}\n--- model requests\n{requests}"
    # The done flag comes before the turn ends: wait for the last hooks too.
    wait_until(lambda: all(w.state is WorkerState.IDLE for w in control.status(fleet).workers), 30, "the turns to end")
    bus_text = fleet.bus.read_text()
    for n in range(1, N + 1):
        assert f"[W{n}] worker {n} checked in" in bus_text
        assert "all good" in fleet.result(n).read_text()
        assert len(prompts(fleet, n)) == 1  # the pointer arrived once
        tools = [e.tool_name for e in fleet.hook_events(n) if e.hook_event_name == "PostToolUse"]
        assert tools == BRIEF_TOOLS
    view = control.status(fleet)
    assert all(w.done and w.result for w in view.workers)
    # Every request reached the model through the gateway, with the user's key and not a worker token.
    assert {r.key_digest for r in model.requests} == {key_digest(KEY)}
    steps = [r.step for r in model.requests]
    assert steps.count("Bash") == 2 * N and steps.count("Write") == N and steps.count("Read") == N
    # The gateway's ledger pairs each call with its result, and counted each worker's usage.
    gateway_books(
        fleet,
        lambda usage, ledger: all(
            sum(e["kind"] == "tool_result" and e["worker"] == n for e in ledger) >= len(BRIEF_TOOLS)
            and usage["workers"].get(str(n), {}).get("requests", 0) >= 5
            for n in range(1, N + 1)
        ),
    )
    ledger = [json.loads(line) for line in fleet.model_ledger.read_text().splitlines()]
    for n in range(1, N + 1):
        uses = {e["id"]: e for e in ledger if e["worker"] == n and e["kind"] == "tool_use"}
        results = {e["id"]: e for e in ledger if e["worker"] == n and e["kind"] == "tool_result"}
        assert [u["tool"] for u in uses.values()] == BRIEF_TOOLS
        assert set(results) == set(uses) and not any(r["is_error"] for r in results.values())
    usage = json.loads((fleet.model_dir / "usage.json").read_text())
    assert all(usage["workers"][str(n)]["requests"] >= 5 for n in range(1, N + 1))
    # The recording replays: each main request of worker 1, as another run on another day would send it
    # (its own folders, another <session_context>), gets the recorded answer, in order.
    replayer = Replayer(fleet.root, "/other/run", "/other/work")
    recorded = [x for x in read_exchanges(fleet.exchanges(1)) if x.key.kind == "main"]
    assert len(recorded) == 5
    for x in recorded:
        request = _moved(x.request, {str(fleet.root): "/other/run", fleet.info().workdir: "/other/work"})
        answer = replayer.answer(1, x.method, x.path, request)
        assert isinstance(answer, Exchange) and answer.seq == x.seq, answer


def _moved(request: dict[str, object], folders: dict[str, str]) -> dict[str, object]:
    """`request` as a run in other folders, on another day, would send it."""
    text = json.dumps(request)
    for old, new in folders.items():
        text = text.replace(old, new)
    text = re.sub(r"Today's date is [^.]*\.", "Today's date is Saturday, January 2, 2027.", text)
    moved: dict[str, object] = json.loads(text)
    return moved


def test_killed_agent_shows_as_crashed_and_restarts_resumed(fleet: RunFolder, model: ScriptedModelServer) -> None:
    assert orch("send", "gm", "1", "remember this conversation").exit_code == 0
    wait_until(lambda: control.status(fleet).workers[0].state is WorkerState.IDLE, 30, "the turn to finish")
    session = fleet.hook_events(1)[0].session_id
    assert session is not None
    kill_agent(fleet, 1)
    # Restarted with its next prompt on the command line (as the lead's recovery does), it resumes the same
    # Gemini CLI session.
    launch.restart(fleet, 1, confinement_of(fleet.info()), "are you back")
    starts = wait_until(
        lambda: [e for e in fleet.hook_events(1) if e.hook_event_name == "SessionStart"][1:], 30, "the resumed start"
    )
    assert starts[0].session_id == session and starts[0].model_extra
    assert starts[0].model_extra.get("source") == "resume"
    wait_until(lambda: prompts(fleet, 1)[-1:] == ["are you back"], 30, "the prompt of the new life")
    wait_until(lambda: control.status(fleet).workers[0].state is WorkerState.IDLE, 30, "the resumed turn to end")
    # The model has the earlier conversation again. (The pinned Gemini CLI answers the command-line prompt of a
    # resumed session before it has loaded the old history, which then replaces that turn: from the next
    # prompt on, the model sees the resumed conversation. Under load that loading outlasts the turn: the worker
    # reads as idle with "Resuming session..." still in place of its input box, and the send waits it out.
    # docs/agents/gemini.md)
    assert orch("send", "gm", "1", "third prompt").exit_code == 0
    wait_until(lambda: control.status(fleet).workers[0].state is WorkerState.IDLE, 30, "the third turn to end")
    asked = [
        json.dumps(x.request)
        for x in read_exchanges(fleet.exchanges(1))
        if x.key.kind == "main" and "third prompt" in json.dumps(x.request)
    ]
    assert asked and all("remember this conversation" in body for body in asked), asked
    assert orch("kill", "gm").exit_code == 0
    assert fleet.log(1).stat().st_size > 0  # the transcript outlives the run


@pytest.mark.parametrize(
    ("answer", "state"),
    [("deny", WorkerState.IDLE), ("allow", WorkerState.IDLE), ("ask", WorkerState.WAITING_FOR_PERMISSION)],
)
def test_permission_request_is_answered_by_the_policy(
    model: ScriptedModelServer, tmp_path: Path, answer: str, state: WorkerState
) -> None:
    """web_fetch is outside the adapter's allow list: the run's policy denies it without a dialog (the model
    is told why), approves it (Allow pressed on the dialog, the only way: Gemini CLI's hooks cannot approve),
    or, under ask, the prompt shows and the worker waits for permission."""
    workdir = tmp_path / "w"
    workdir.mkdir()
    # Local strict (the default): the approver presses Allow through the relay's socket for its own pane.
    run = _up(f"perm-{answer}", workdir, 1)
    assert run.info().isolation is Isolation.STRICT
    message = "orch policy: no fetching" if answer == "deny" else None
    atomic_write(run.permission_policy, PermissionAnswer(answer=answer, message=message).model_dump_json())  # type: ignore[arg-type]
    assert orch("brief", run.name, "1", _webfetch_brief(tmp_path)).exit_code == 0

    def current() -> WorkerState:
        return control.status(run).workers[0].state

    def turn_over() -> bool:
        return any(e.hook_event_name == "Stop" for e in run.hook_events(1))

    settled = turn_over if state is WorkerState.IDLE else (lambda: current() is state)
    wait_until(lambda: settled() and current() is state, 60, f"the worker to be {state.value}")
    requests = [e for e in run.hook_events(1) if e.hook_event_name == "PermissionRequest"]
    if answer == "deny":
        (request,) = requests
        assert request.orch_decision == "deny" and request.tool_name == "web_fetch"
        ledger = [json.loads(line) for line in run.model_ledger.read_text().splitlines()]
        (result,) = [e for e in ledger if e["kind"] == "tool_result" and "no fetching" in (e["output"] or "")]
        assert result["is_error"]
        assert "Allow once" not in orch("read", run.name, "1").output
    elif answer == "allow":  # approved on the dialog: the call ran (and failed: nothing listens there)
        (request,) = requests
        assert request.orch_decision == "allow" and request.tool_name == "web_fetch"
        ledger = [json.loads(line) for line in run.model_ledger.read_text().splitlines()]
        assert [e["tool"] for e in ledger if e["kind"] == "tool_use"][-1:] == ["web_fetch"]
        assert any(
            e["hook_event_name"] == "PostToolUse" and e.get("tool_name") == "web_fetch"
            for e in map(vars, run.hook_events(1))
        )
        assert "Allow once" not in orch("read", run.name, "1").output
    else:  # the dialog is up, and its notice reads as an unanswered PermissionRequest for the tool
        (request,) = requests
        assert (request.orch_decision, request.tool_name, request.notification_type) == (
            None,
            "web_fetch",
            "permission_prompt",
        )
        wait_until(lambda: "Allow" in orch("read", run.name, "1").output, 10, "the dialog on screen")


def test_doctor_reports_gemini(model: ScriptedModelServer) -> None:
    result = orch("doctor")
    assert result.exit_code == 0, result.output
    lines = {line.split()[1]: line for line in result.output.splitlines() if line[:3] in ("ok ", "!! ", "-- ")}
    assert lines["gemini"].startswith("ok") and GEMINI_CLI_VERSION in lines["gemini"]
    assert "GEMINI_API_KEY" in result.output and KEY not in result.output


def test_offline_fleet_needs_no_credential(gemini_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`orch up --local --agent gemini --offline`: the run's gateway starts the scripted model itself."""
    monkeypatch.setenv("ORCH_GEMINI_BIN", str(gemini_bin))
    for var in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GEMINI_CLI_HOME"):
        monkeypatch.delenv(var, raising=False)
    workdir = tmp_path / "w"
    workdir.mkdir()
    run = _up("off", workdir, 1, "--offline")
    brief = tmp_path / "brief.md"
    brief.write_text(
        orch_script({"write": str(run.result(1)), "content": "offline\n"}, {"bash": f"touch {run.done(1)}"})
    )
    assert orch("brief", "off", "1", brief).exit_code == 0
    waited = orch("wait", "off", "--timeout", "60")
    assert waited.exit_code == 0, waited.output + diagnose(run)
    assert run.result(1).read_text() == "offline\n"
    assert json.loads((run.model_dir / "usage.json").read_text())["offline"] is True


def test_a_folders_own_settings_hooks_and_mcp_servers_never_run(model: ScriptedModelServer, tmp_path: Path) -> None:
    """A folder holding every agent's project configuration: Gemini CLI starts it untrusted with no dialog, orch's
    hooks (an extension of its own, which an untrusted folder keeps) see its tool call, none of the folder's run."""
    run = tool_in_hostile_folder("gmcfg", tmp_path, "gemini")
    assert pwned(run.outbox_dir) == []
    assert Event.DIALOG_ANSWERED not in [json.loads(line)["event"] for line in run.events.read_text().splitlines()]

"""The fleet core with the real Codex CLI binary, offline: its run's gateway starts the scripted model,
which answers Codex's Responses API calls (orch.offline.apis.openai_responses)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orch.agents.codex.adapter import has_rollout
from orch.backends.registry import confinement_of
from orch.fleet import control, launch
from orch.gateway.recording.exchanges import read_exchanges
from orch.lead.controller import Controller, initial_state
from orch.run.events import Event
from orch.run.files import atomic_write
from orch.run.folder import RunFolder
from orch.run.records import PermissionAnswer, WorkerState
from orch.spec.model import FleetSpec, Limits, TaskSpec, Timeouts
from orch.waits import wait_until
from tests.helpers import demo_spec, diagnose, gateway_books, kill_agent, orch, prompts, worker_brief
from tests.hostile import pwned, tool_in_hostile_folder

pytestmark = pytest.mark.codex
N = 2
FAKE_KEY = "sk-orch-codex-test-key-0123456789"
DIALOGS = ("Trust this folder", "Sign in with ChatGPT", "Hooks need review", "Try new model", "Welcome to Codex")


@pytest.fixture
def codex_env(monkeypatch: pytest.MonkeyPatch, codex_bin: Path) -> None:
    monkeypatch.setenv("ORCH_CODEX_BIN", str(codex_bin))
    # A key in the user's environment must reach neither the workers nor the run folder (offline: nowhere).
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("CODEX_HOME", raising=False)


def _up(tmp_path: Path, name: str, *extra: str) -> RunFolder:
    workdir = tmp_path / f"{name}-brand-new-workdir"  # never trusted before: no dialog may appear
    workdir.mkdir()
    subprocess.run(["git", "init", "-q", str(workdir)], check=True)  # a git workdir is what asks for trust
    result = orch("up", name, "-n", str(N), "--workdir", workdir, "--local", "--agent", "codex", "--offline", *extra)
    assert result.exit_code == 0, result.output
    return RunFolder.for_name(name)


@pytest.fixture
def fleet(codex_env: None, tmp_path: Path) -> Iterator[RunFolder]:
    run = _up(tmp_path, "cx")
    yield run
    orch("kill", run.name)


def _brief(run: RunFolder, n: int) -> str:
    return worker_brief(run, n, result="all good, 'quoted' and $dollar\n")


def test_workers_boot_with_no_dialog(fleet: RunFolder) -> None:
    view = control.status(fleet)
    assert [w.state for w in view.workers] == [WorkerState.IDLE] * N
    events = [json.loads(line)["event"] for line in fleet.events.read_text().splitlines()]
    assert Event.DIALOG_ANSWERED not in events, "a first-run dialog appeared"
    for n in range(1, N + 1):
        screen = orch("read", "cx", str(n)).output
        assert not [d for d in DIALOGS if d in screen], screen
        assert "OpenAI Codex" in screen
    # The worker's key is its run-scoped token; the user's key stays out of the run and its config dirs.
    for root in (fleet.root, fleet.config_dir(1).parent):
        for path in root.rglob("*"):
            if path.is_file() and path.suffix in (".json", ".jsonl", ".toml", ".md", ".log"):
                assert FAKE_KEY not in path.read_text(errors="replace"), path


def test_thirty_line_message_is_one_submission(fleet: RunFolder) -> None:
    text = "\n".join(f"{i:02d}: a line of a long multi-line brief" for i in range(1, 31))
    before = len(prompts(fleet, 2))
    assert orch("send", "cx", "2", "--file", "-", input=text).exit_code == 0
    got = prompts(fleet, 2)[before:]
    assert got == [text]  # exactly one submission, every line in order
    sent = [json.loads(line) for line in fleet.events.read_text().splitlines() if '"sent"' in line]
    assert sent[-1]["data"]["enters"] == 1  # taken at the first Enter: no wedged paste


def test_briefed_workers_post_write_and_finish(fleet: RunFolder, tmp_path: Path) -> None:
    for n in range(1, N + 1):
        brief = tmp_path / f"brief-{n}.md"
        brief.write_text(_brief(fleet, n))
        result = orch("brief", "cx", str(n), brief)
        assert result.exit_code == 0, result.output
    waited = orch("wait", "cx", "--timeout", "90")
    assert waited.exit_code == 0, f"{waited.output}{diagnose(fleet)}"
    bus_text = fleet.bus.read_text()
    for n in range(1, N + 1):
        assert f"[W{n}] worker {n} checked in" in bus_text
        assert fleet.result(n).read_text() == f"# Result of worker {n}\nall good, 'quoted' and $dollar\n"
    view = control.status(fleet)
    assert all(w.done and w.result for w in view.workers)
    # The gateway metered every call and ledgered each tool call with its result.
    gateway_books(
        fleet, lambda usage, ledger: sum(e["kind"] == "tool_result" and e["worker"] == 1 for e in ledger) >= 4
    )
    ledger = [json.loads(line) for line in fleet.model_ledger.read_text().splitlines()]
    uses = {e["id"] for e in ledger if e["kind"] == "tool_use" and e["worker"] == 1}
    results = {e["id"] for e in ledger if e["kind"] == "tool_result" and e["worker"] == 1}
    assert len(uses) == 4 and uses == results  # Read of the brief, bus post, write, touch
    usage = json.loads(fleet.model_usage.read_text())
    assert usage["workers"]["1"]["requests"] >= 5
    exchanges = read_exchanges(fleet.exchanges(1))
    assert {e.path for e in exchanges} == {"/responses"} and all(e.status == 200 for e in exchanges)


def test_killed_agent_shows_as_crashed_and_restarts_resumed(fleet: RunFolder) -> None:
    session = fleet.hook_events(1)[0].session_id
    assert session is not None and has_rollout(fleet.config_dir(1), session)
    kill_agent(fleet, 1)
    seen = len(fleet.hook_events(1))
    # No prompt: Codex resumes with orch's one-line resume prompt.
    launch.restart(fleet, 1, confinement_of(fleet.info()))
    starts = wait_until(
        lambda: [e for e in fleet.hook_events(1)[seen:] if e.hook_event_name == "SessionStart"], 60, "the resumed start"
    )
    assert starts[0].session_id == session
    assert starts[0].model_extra and starts[0].model_extra.get("source") == "resume"
    wait_until(lambda: control.status(fleet).workers[0].state is WorkerState.IDLE, 30, "the resumed worker to idle")
    assert orch("send", "cx", "1", "still there?").exit_code == 0


def test_a_turn_codex_gives_up_on_is_a_failed_turn_not_busy(fleet: RunFolder) -> None:
    """Codex fires no hook when it abandons a turn after API errors: its session log says so, and the
    watcher beside it reports a StopFailure under the error names the controller acts on."""
    for n, fail in ((1, "rate_limit"), (2, "authentication")):
        script = json.dumps({"fail": fail})
        assert orch("send", "cx", str(n), f"Go.\n\n```orch-script\n{script}\n```").exit_code == 0

    def failed() -> list[tuple[WorkerState, str | None]] | None:
        rows = [(w.state, w.detail) for w in control.status(fleet).workers]
        return rows if all(state is not WorkerState.BUSY for state, _ in rows) else None

    rows = wait_until(lambda: failed() if len(fleet.hook_events(2)) > 2 else None, 90, "both failed turns")
    assert rows == [(WorkerState.RATE_LIMITED, "rate_limit"), (WorkerState.ERROR, "authentication_failed")]
    failure = [e for e in fleet.hook_events(2) if e.hook_event_name == "StopFailure"][-1]
    assert "/t/" not in json.dumps(failure.model_dump())  # Codex's message names the URL, with the token


@pytest.mark.parametrize("answer", ["allow", "deny"])
def test_permission_request_answered_by_policy(codex_env: None, tmp_path: Path, answer: str) -> None:
    # Shared: Codex's own sandbox is on (off inside orch's). With bubblewrap installed, its `touch` of the done
    # flag runs in that sandbox through the codex-linux-sandbox alias the adapter makes (CODEX_HOME is in /tmp).
    run = _up(tmp_path, f"perm-{answer}", "--permission-mode", "on-request", "--isolation", "shared")
    target = Path.home() / f".orch-codex-permission-{os.getpid()}-{answer}"  # outside every writable root
    target.unlink(missing_ok=True)
    atomic_write(run.permission_policy, PermissionAnswer(answer=answer).model_dump_json())  # type: ignore[arg-type]
    escalate = {
        "tool": "exec_command",
        "input": {"cmd": f"touch {target}", "sandbox_permissions": "require_escalated", "justification": "test"},
    }
    script = "\n".join(json.dumps(s) for s in (escalate, {"bash": f"touch {run.done(1)}"}, {"reply": "Finished."}))
    brief = tmp_path / "brief.md"
    brief.write_text(f"```orch-script\n{script}\n```\n")
    try:
        assert orch("brief", run.name, "1", brief).exit_code == 0
        wait_until(lambda: run.done(1).exists(), 60, "the worker to finish")
        asked = [e for e in run.hook_events(1) if e.hook_event_name == "PermissionRequest"]
        assert [e.orch_decision for e in asked] == [answer]
        assert target.exists() is (answer == "allow")
    finally:
        target.unlink(missing_ok=True)
        orch("kill", run.name)


def test_demo_fleet_of_codex_workers_runs_and_replays(codex_env: None, tmp_path: Path) -> None:
    """`orch run` end to end with Codex workers: the demo's finder and verifier jobs, evidence checked
    against the gateway's ledger, then the same spec replayed from the recording with no model behind it."""
    spec = demo_spec(tmp_path, "codex")
    recorded = orch("run", spec, "--local", "--name", "cxdemo")
    assert recorded.exit_code == 0, recorded.output  # the demo's false positive is refuted, as designed
    run = RunFolder.for_name("cxdemo")
    outcome = {f["id"]: f["status"] for f in json.loads(run.report_json.read_text())["findings"]}
    assert outcome == {"pages-F1": "CONFIRMED", "stats-F1": "REFUTED"}
    assert json.loads(run.report_json.read_text())["evidence_source"] == "ledger"
    replayed = orch("run", spec, "--local", "--name", "cxdemo-replay", "--replay", "cxdemo")
    assert replayed.exit_code == 0, replayed.output
    again = RunFolder.for_name("cxdemo-replay")
    assert {f["id"]: f["status"] for f in json.loads(again.report_json.read_text())["findings"]} == outcome
    assert "replay-miss" not in again.model_log.read_text()


def test_a_folders_own_config_hooks_and_mcp_servers_never_run(codex_env: None, tmp_path: Path) -> None:
    """A git folder holding every agent's project configuration: Codex opens it restricted (the one screen it shows
    at each start in a folder orch keeps untrusted, answered), orch's hooks see its tool call, none of the folder's
    config, hooks or MCP servers runs."""
    run = tool_in_hostile_folder("cxcfg", tmp_path, "codex", "--offline")
    assert pwned(run.outbox_dir) == []
    logged = [json.loads(line)["event"] for line in run.events.read_text().splitlines()]
    assert Event.START_SCREEN_ANSWERED in logged and Event.DIALOG_ANSWERED not in logged


def test_a_restart_by_the_controller_leaves_its_start_screen_to_the_loop(fleet: RunFolder) -> None:
    """The controller's restart of a crashed Codex returns while Codex shows "Folder access" (it used to wait for
    the boot, holding up the loop and every other worker); the loop's next looks answer it, and it boots."""
    spec = FleetSpec(tasks=[TaskSpec(goal="g")], workers=N, limits=Limits(restart_backoff=0))
    state = initial_state(fleet, spec)
    lead = Controller(fleet, spec, state)
    book = state.book(1)
    seen = len(fleet.hook_events(1))
    kill_agent(fleet, 1)

    def step() -> None:
        lead.desk.panes = lead.desk.server.panes()
        lead.watch(book)

    step()  # seen crashed: its restart scheduled at once (no backoff)
    step()  # restarted; returns before the screen is answered
    assert book.restarts == 1
    pane = lead.desk.server.pane(1)
    wait_until(lambda: "Open restricted" in lead.desk.server.capture(pane.pane_id), 60, "the start screen")
    assert not [e for e in fleet.hook_events(1)[seen:] if e.hook_event_name == "SessionStart"]

    def booted() -> bool:
        step()
        return any(e.hook_event_name == "SessionStart" for e in fleet.hook_events(1)[seen:])

    wait_until(booted, 60, "the restarted worker to boot", interval=0.2)
    answered = [json.loads(line) for line in fleet.events.read_text().splitlines()]
    assert [e["worker"] for e in answered if e["event"] == Event.START_SCREEN_ANSWERED][-1] == 1
    assert book.restarts == 1 and book.dead is None


def test_a_restarted_worker_not_booted_within_the_specs_boot_timeout_is_a_crash(fleet: RunFolder) -> None:
    spec = FleetSpec(tasks=[TaskSpec(goal="g")], workers=N, limits=Limits(restart_backoff=0), timeouts=Timeouts(boot=1))
    state = initial_state(fleet, spec)
    lead = Controller(fleet, spec, state)
    book = state.book(1)
    kill_agent(fleet, 1)
    for _ in range(2):  # seen crashed, then restarted
        lead.desk.panes = lead.desk.server.panes()
        lead.watch(book)
    restarted = book.restarted_at
    assert restarted is not None and book.restarts == 1
    wait_until(lambda: time.time() > restarted + 1, 10, "the spec's boot timeout to pass")  # no look answered it
    lead.desk.panes = lead.desk.server.panes()
    lead.watch(book)
    seen = [json.loads(line) for line in fleet.events.read_text().splitlines()]
    crashes = [e["data"]["why"] for e in seen if e["event"] == Event.CRASH_SEEN and e["worker"] == 1]
    assert crashes[-1] == "did not boot within 1s of its restart"

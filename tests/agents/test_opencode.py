"""The fleet core with the real opencode binary, through the run's gateway to the scripted model (--offline)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orch.agents.opencode import config_deps, has_session, stateline_source
from orch.backends.registry import confinement_of
from orch.fleet import control, launch
from orch.run import hookwriter
from orch.run.events import Event
from orch.run.files import atomic_write
from orch.run.folder import RunFolder
from orch.run.records import PermissionAnswer, WorkerState
from orch.versions import OPENCODE_VERSION
from orch.waits import wait_until
from tests.helpers import diagnose, gateway_books, kill_agent, orch, pinned_bin, prompts, worker_brief
from tests.hostile import pwned, tool_in_hostile_folder

pytestmark = pytest.mark.opencode
BOOT = "120"  # seconds: opencode takes 10-15 s to draw its TUI on a busy 2-core machine


@pytest.fixture(autouse=True)
def opencode_bin(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The pinned opencode installed by `orch setup` (or ORCH_OPENCODE_BIN), with its plugin package."""
    path = pinned_bin("opencode")
    if not config_deps(path).is_dir():
        pytest.fail(f"opencode's plugin package not found beside {path}: run orch setup --agents opencode")
    monkeypatch.setenv("ORCH_OPENCODE_BIN", str(path))
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENCODE_CONFIG_DIR", "OPENCODE_CONFIG_CONTENT"):
        monkeypatch.delenv(var, raising=False)
    return path


def up(name: str, tmp_path: Path, workers: int = 1, *extra: str) -> RunFolder:
    workdir = tmp_path / f"brand-new-{name}"  # never seen by opencode: no dialog may appear
    workdir.mkdir()
    # A hostile tree: its own opencode config and plugin must not load (they could re-point the provider).
    (workdir / ".opencode" / "plugins").mkdir(parents=True)
    (workdir / ".opencode" / "opencode.json").write_text('{"model": "orch/from-the-workdir"}')
    probe = tmp_path / f"{name}-probe"
    plugin = 'import { writeFileSync } from "node:fs"\nexport const P = async () => { writeFileSync(PROBE, "x") }\n'
    (workdir / ".opencode" / "plugins" / "probe.js").write_text(plugin.replace("PROBE", json.dumps(str(probe))))
    result = orch("up", name, "-n", str(workers), "-w", workdir, "--local", "--agent", "opencode", "--offline",
                  "--boot-timeout", BOOT, *extra)  # fmt: skip
    assert result.exit_code == 0, result.output
    return RunFolder.for_name(name)


def test_boots_with_no_dialog_takes_one_submission_and_finishes_a_brief(tmp_path: Path) -> None:
    run = up("oc", tmp_path, 2)
    assert [w.state for w in control.status(run).workers] == [WorkerState.IDLE] * 2
    events = [json.loads(line)["event"] for line in run.events.read_text().splitlines()]
    assert Event.DIALOG_ANSWERED not in events
    assert not (tmp_path / "oc-probe").exists()  # the workdir's plugin never ran
    for n in (1, 2):
        screen = orch("read", "oc", str(n)).output
        assert "Ask anything" in screen and "Zen" not in screen and "Connect a provider" not in screen
        assert "from-the-workdir" not in screen
        config = (run.config_dir(n) / "opencode" / "opencode.json").read_text()
        assert "/t/" not in config  # the worker's gateway token comes by environment, never a file
        assert (run.config_dir(n) / "opencode" / "node_modules").is_symlink()  # nothing installed from npm

    # A 30-line message arrives as one submission, every line in order.
    text = "\n".join(f"{i:02d}: a line of a long multi-line brief" for i in range(1, 31))
    assert orch("send", "oc", "2", "--file", "-", input=text).exit_code == 0
    (got,) = prompts(run, 2)
    assert got.rstrip().splitlines() == text.splitlines()  # opencode adds a space after a paste

    # Shell and write tool calls: post to the bus, write the result, touch the done flag.
    brief = tmp_path / "brief-1.md"
    brief.write_text(worker_brief(run, 1))
    assert orch("brief", "oc", "1", brief).exit_code == 0
    waited = orch("wait", "oc", "--timeout", "120", "--only", "1")
    assert waited.exit_code == 0, waited.output + diagnose(run)
    assert "[W1] worker 1 checked in" in run.bus.read_text()
    assert "all good" in run.result(1).read_text()
    tools = [e.tool_name for e in run.hook_events(1) if e.hook_event_name == "PreToolUse"]
    assert tools == ["read", "bash", "write", "bash"]
    # Every model call went through the gateway, counted and ledgered.
    gateway_books(run, lambda usage, ledger: usage["workers"].get("1", {}).get("requests", 0) >= 5)
    usage = json.loads(run.model_usage.read_text())
    assert usage["workers"]["1"]["requests"] >= 5 and "gpt-4.1" in usage["workers"]["1"]["by_model"]
    ledger = [json.loads(line) for line in run.model_ledger.read_text().splitlines()]
    assert [e["tool"] for e in ledger if e["worker"] == 1 and e["kind"] == "tool_use"] == tools


def test_killed_agent_shows_as_crashed_and_restarts_resumed(tmp_path: Path) -> None:
    run = up("ock", tmp_path)
    assert orch("send", "ock", "1", "remember this conversation").exit_code == 0
    wait_until(lambda: control.status(run).workers[0].state is WorkerState.IDLE, 60, "the turn to finish")
    session = launch.last_session(run, 1)
    assert session is not None and session.startswith("ses_")
    wait_until(lambda: has_session(run.config_dir(1) / "data", session), 30, "the session in opencode's database")
    kill_agent(run, 1)
    launch.restart(run, 1, confinement_of(run.info()))
    starts = wait_until(
        lambda: [e for e in run.hook_events(1) if e.hook_event_name == "SessionStart"][1:], 60, "the resumed start"
    )
    assert starts[0].session_id == session and starts[0].model_extra == {"source": "resume"}
    wait_until(lambda: (run.config_dir(1) / "orch-ready").exists(), 60, "the resumed TUI")
    assert orch("send", "ock", "1", "still there?").exit_code == 0
    assert prompts(run, 1)[-1] == "still there?"
    after = [e for e in run.hook_events(1) if e.hook_event_name == "UserPromptSubmit"][-1]
    assert after.session_id == session  # the same opencode session, its history kept
    assert orch("kill", "ock").exit_code == 0


def _webfetch_brief(tmp_path: Path) -> Path:
    fetch = {"tool": "webfetch", "input": {"url": "http://127.0.0.1:9/", "format": "text"}}
    brief = tmp_path / "fetch.md"
    brief.write_text(f"Fetch a page.\n\n```orch-script\n{json.dumps(fetch)}\n" + '{"reply": "done"}\n```\n')
    return brief


def test_permission_request_waits_or_is_answered_by_the_policy(tmp_path: Path) -> None:
    """webfetch asks in opencode's `build` mode: with no policy the worker waits on the dialog; with the
    run's policy (`orch run`'s `permissions`) the plugin answers it and the worker goes on."""
    run = up("ocp", tmp_path, 2)
    brief = _webfetch_brief(tmp_path)
    assert orch("brief", "ocp", "1", brief).exit_code == 0

    def state(n: int) -> WorkerState:
        return control.status(run).workers[n - 1].state

    wait_until(
        lambda: state(1) is WorkerState.WAITING_FOR_PERMISSION, 90, "the permission request", watch=run.state_dir
    )
    asked = [e for e in run.hook_events(1) if e.hook_event_name == "PermissionRequest"][-1]
    assert asked.tool_name == "webfetch" and asked.orch_decision is None

    atomic_write(run.permission_policy, PermissionAnswer(answer="deny", message="no fetching").model_dump_json())
    assert orch("brief", "ocp", "2", brief).exit_code == 0
    wait_until(lambda: any(e.hook_event_name == "Stop" for e in run.hook_events(2)), 90, "worker 2's turn to end")
    answered = [e for e in run.hook_events(2) if e.hook_event_name == "PermissionRequest"]
    assert [e.orch_decision for e in answered] == ["deny"]
    assert state(2) is WorkerState.IDLE and state(1) is WorkerState.WAITING_FOR_PERMISSION


def test_unknown_permission_mode_is_refused_and_doctor_lists_opencode(tmp_path: Path) -> None:
    workdir = tmp_path / "w"
    workdir.mkdir()
    result = orch("up", "bad", "-w", workdir, "--local", "--agent", "opencode", "--offline",
                  "--permission-mode", "bypassPermissions")  # fmt: skip
    assert result.exit_code == 2 and "build, ask, auto" in result.output
    assert not RunFolder.for_name("bad").root.exists() or not list(RunFolder.for_name("bad").root.iterdir())
    doctor = orch("doctor").output
    assert "opencode" in doctor and OPENCODE_VERSION in doctor


def test_a_rate_limit_is_retried_by_opencode_and_shown(tmp_path: Path) -> None:
    """opencode retries a 429 itself: the worker stays busy (ApiRetry), the gateway records the limit."""
    run = up("ocr", tmp_path)
    brief = tmp_path / "fail.md"
    brief.write_text('Fail.\n\n```orch-script\n{"fail": "rate_limit"}\n{"reply": "after"}\n```\n')
    assert orch("brief", "ocr", "1", brief).exit_code == 0
    retry = wait_until(
        lambda: next((e for e in run.hook_events(1) if e.hook_event_name == "ApiRetry"), None), 90, "opencode's retry"
    )
    assert "rate limit" in str(retry.reason).lower()
    row = control.status(run).workers[0]
    assert row.state is WorkerState.BUSY
    assert '"rate-limited"' in run.model_log.read_text()


@pytest.mark.skipif(
    os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("ip")), reason="needs root, unshare and ip"
)
def test_a_fleet_with_no_network_at_all_never_needs_one(tmp_path: Path) -> None:
    """In a network namespace with loopback only: opencode boots and works through the gateway, so it never
    needs its hosted models, models.dev, npm or an update server."""
    workdir = tmp_path / "w"
    workdir.mkdir()
    run = RunFolder.for_name("net")
    steps = [
        {"bash": "orch bus post net --as 1 'no network needed'"},
        {"write": str(run.result(1)), "content": "ok\n"},
        {"bash": f"touch {run.done(1)}"},
        {"reply": "Finished."},
    ]
    brief = tmp_path / "brief.md"
    brief.write_text("Task.\n\n```orch-script\n" + "\n".join(json.dumps(s) for s in steps) + "\n```\n")
    orch_bin = Path(sys.executable).parent / "orch"
    commands = [
        "ip link set lo up",
        shlex.join(
            [
                str(orch_bin),
                "up",
                "net",
                "-w",
                str(workdir),
                "--local",
                "--agent",
                "opencode",
                "--offline",
                "--boot-timeout",
                BOOT,
            ]
        ),
        shlex.join([str(orch_bin), "brief", "net", "1", str(brief)]),
        shlex.join([str(orch_bin), "wait", "net", "--timeout", "120"]),
    ]
    done = subprocess.run(
        ["unshare", "-n", "sh", "-c", " && ".join(commands)], capture_output=True, text=True, timeout=400, check=False
    )
    try:
        assert done.returncode == 0, done.stdout + done.stderr + diagnose(run)
        assert "[W1] no network needed" in run.bus.read_text() and run.result(1).read_text() == "ok\n"
    finally:
        orch("kill", "net")


def test_a_folders_own_config_plugins_and_mcp_servers_never_run(tmp_path: Path) -> None:
    """Every agent's project configuration in the folder (`up` above plants opencode's own config and plugin too):
    OPENCODE_DISABLE_PROJECT_CONFIG keeps each of them off, and orch's plugin still reports the tool call."""
    run = tool_in_hostile_folder("occfg", tmp_path, "opencode", "--offline", "--boot-timeout", BOOT)
    assert pwned(run.outbox_dir) == []


# Payloads as the server plugin builds them: unicode a reader's splitlines() would cut at, control characters,
# fields over hookwriter.MAX_FIELD (astral characters across the cut), nested tool input with floats.
LONG = "ab\U0001f600" * 1500
ODD = 'h\u00e9 \u2028 \x85 \x7f \x01 "q" \\ \U0001f600'
NESTED = {"command": LONG, "n": [1, 2.5e-7, 1e21, 1.5, None, True], "k\u00e9": {}}
PAYLOADS: list[dict[str, object]] = [
    {"hook_event_name": "SessionStart", "source": "startup"},
    {"hook_event_name": "UserPromptSubmit", "session_id": "ses_1", "prompt": ODD},
    {"hook_event_name": "UserPromptSubmit", "prompt": LONG},
    {"hook_event_name": "PreToolUse", "tool_name": "bash", "tool_input": NESTED},
    {"source": "no event name", "transcript_path": "/dropped", "n": 3},
]


def test_the_plugins_state_lines_are_the_hook_writers(opencode_bin: Path, tmp_path: Path) -> None:
    """The server plugin writes its state lines itself (orch/data/opencode-stateline.js) in hookwriter.py's format:
    run in opencode's own runtime, each line is byte for byte the hook writer's for the payload it would have piped."""
    (tmp_path / "stateline.js").write_text(stateline_source())
    state = tmp_path / "agent-1.jsonl"
    script = tmp_path / "write.mjs"
    script.write_text(
        'import { appendState, stateLine } from "./stateline.js"\n'
        f"for (const p of {json.dumps(PAYLOADS)}) appendState({json.dumps(str(state))}, p)\n"
        f'appendState({json.dumps(str(state))}, {{hook_event_name: "Stop", session_id: undefined}})\n'
        "process.stdout.write(stateLine({a: 1}, 1796553149) + stateLine({a: 1}, 1796553149.25))\n"
    )
    # A Bun-compiled binary runs a script with BUN_BE_BUN=1: the runtime the plugin runs in.
    done = subprocess.run([opencode_bin, "run", script], env={**os.environ, "BUN_BE_BUN": "1"},
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = state.read_text().splitlines(keepends=True)
    assert len(lines) == len(PAYLOADS) + 1
    for line, payload in zip(lines, [*PAYLOADS, {"hook_event_name": "Stop"}], strict=True):
        expected = hookwriter.slim(json.loads(json.dumps(payload)))
        expected["ts"] = json.loads(line)["ts"]
        assert line == json.dumps(expected) + "\n"
    assert done.stdout == '{"ts": 1796553149.0, "a": 1, "hook_event_name": "unknown"}\n' + (
        '{"ts": 1796553149.25, "a": 1, "hook_event_name": "unknown"}\n'
    )

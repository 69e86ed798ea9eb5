"""orch.fleet.tmux on a real tmux server, driving the scripted agent (a real raw-mode TUI) in its panes."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from orch.contracts import LaunchSpec
from orch.errors import NoAnswerError, NotFoundError, SandboxError, UsageError
from orch.fleet.tmux import PaneInfo, TmuxServer, check_tmux
from orch.waits import wait_until

TIMEOUT = 20.0
AGENT = [sys.executable, "-m", "orch.agents.scripted.tui"]


@pytest.fixture
def server() -> Iterator[TmuxServer]:
    srv = TmuxServer(f"orch-test-{uuid.uuid4().hex[:8]}")
    yield srv
    srv.kill()


def agent_spec(tmp_path: Path, worker: int, *extra: str, **env: str) -> LaunchSpec:
    state = tmp_path / "state" / f"{worker}.jsonl"
    state.parent.mkdir(exist_ok=True)
    return LaunchSpec(argv=[*AGENT, *extra], env={"ORCH_STATE_FILE": str(state), **env}, cwd=tmp_path)


def state_file(spec: LaunchSpec) -> Path:
    return Path(spec.env["ORCH_STATE_FILE"])


def events(path: Path, name: str | None = None) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    found = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e for e in found if name is None or e["hook_event_name"] == name]


def wait_events(path: Path, name: str, count: int = 1) -> list[dict[str, Any]]:
    def enough() -> list[dict[str, Any]] | None:
        got = events(path, name)
        return got if len(got) >= count else None

    return wait_until(enough, TIMEOUT, f"{count} {name} event(s) in {path}", interval=0.02)


def wait_ready(server: TmuxServer, pane_id: str) -> None:
    """The prompt is printed after bracketed paste is enabled: once tmux shows it, pastes get brackets."""
    wait_until(lambda: "scripted>" in server.capture(pane_id), TIMEOUT, "the scripted prompt", interval=0.02)


def wait_pane(server: TmuxServer, worker: int, dead: bool) -> PaneInfo:
    def check() -> PaneInfo | None:
        pane = server.pane(worker)
        return pane if pane.dead == dead else None

    return wait_until(check, TIMEOUT, f"worker {worker} to be {'dead' if dead else 'alive'}", interval=0.02)


def start_agent(server: TmuxServer, tmp_path: Path, *extra: str, **env: str) -> tuple[str, LaunchSpec]:
    spec = agent_spec(tmp_path, 1, *extra, **env)
    pane_id = server.start("orch-test", spec, 1, dict(os.environ))
    wait_ready(server, pane_id)
    return pane_id, spec


def test_private_server_layout_and_lookup(server: TmuxServer, tmux_tmpdir: Path, tmp_path: Path) -> None:
    sleeper = LaunchSpec(argv=["sleep", "600"], cwd=tmp_path)
    assert server.panes_if_running() is None  # not started yet
    ids = {1: server.start("orch-test", sleeper, 1, dict(os.environ))}
    for worker in range(2, 9):
        ids[worker] = server.add_pane(sleeper, worker)

    # A new pane shows `tmux` until its process has exec'd `sleep`: read the layout once every pane runs it.
    def all_sleeping() -> dict[int, PaneInfo] | None:
        now = server.panes()
        return now if all(p.current_command == "sleep" for p in now.values()) else None

    panes = wait_until(all_sleeping, 30, "every pane to run sleep")
    assert server.panes_if_running() == panes
    assert {n: p.pane_id for n, p in panes.items()} == ids
    assert len(set(ids.values())) == 8 and all(re.fullmatch(r"%\d+", i) for i in ids.values())
    assert {n: p.window for n, p in panes.items()} == {n: 1 if n <= 6 else 2 for n in range(1, 9)}
    assert all(not p.dead and p.pid and p.current_command == "sleep" for p in panes.values())
    assert server._cmd("list-windows", "-F", "#{window_name}") == ["w1-6", "w7-12"]
    assert server._cmd("show-options", "-sv", "exit-empty") == ["on"]
    server_pid = int(server._cmd("display-message", "-p", "#{pid}")[0])
    assert b"new-session" not in Path(f"/proc/{server_pid}/cmdline").read_bytes()  # ps shows no agent argv
    assert server.pane(7) == panes[7]
    calls: list[str] = []
    real = server.server.cmd

    def counted(cmd: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(cmd)
        return real(cmd, *args, **kwargs)

    server.server.cmd = counted  # type: ignore[method-assign]
    assert server.panes() == panes and calls == ["list-panes"]  # the status loop: one call for every pane
    del server.server.cmd
    with pytest.raises(NotFoundError):
        server.pane(9)
    with pytest.raises(UsageError, match="already has a pane"):
        server.add_pane(sleeper, 8)
    with pytest.raises(SandboxError, match="already running"):
        server.start("orch-test", sleeper, 1, dict(os.environ))
    # Only our socket exists: the default server was never started.
    assert [p.name for p in (tmux_tmpdir / f"tmux-{os.getuid()}").iterdir()] == [server.socket_name]
    argv = server.attach_argv(read_only=True)
    assert argv[1:5] == ["-L", server.socket_name, "-f", "/dev/null"] and argv[-2:] == [
        "attach-session",
        "-r",
    ]
    assert "-r" not in server.attach_argv(read_only=False)


def test_a_stopped_server_is_not_taken_for_a_gone_one(tmux_tmpdir: Path, tmp_path: Path) -> None:
    """A server that does not answer is not a server that is gone: the controller would relaunch the fleet on
    it. Each call ends at its deadline with NoAnswerError; resumed, the server serves again."""
    server = TmuxServer(f"orch-test-{uuid.uuid4().hex[:8]}", timeout=1.0)
    server.start("orch-test", LaunchSpec(argv=["sleep", "600"], cwd=tmp_path), 1, dict(os.environ))
    pid = int(server._cmd("display-message", "-p", "#{pid}")[0])
    os.kill(pid, signal.SIGSTOP)
    try:
        for call in (server.alive, server.panes_if_running, server.client_ttys):
            with pytest.raises(NoAnswerError, match="no answer from tmux server"):
                call()
    finally:
        os.kill(pid, signal.SIGCONT)
    assert server.panes_if_running() is not None and server.alive()
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(NoAnswerError, match="tmux kill-server got no answer"):
            server.kill()
    finally:
        os.kill(pid, signal.SIGCONT)  # the kill-server it got may still run now (orch.fleet.tmuxclient)
    server.kill()
    assert server.panes_if_running() is None and not server.alive()


THIRTY_LINES = "\n".join(
    [f"line {i}: quotes ' \" `tick` $HOME #{{hash}} \\ tab\there" for i in range(1, 30)]
    + ["$ printf 'pasted-%s\\n' ok > pasted.txt"]
)


@dataclass
class Delivery:
    steps: list[tuple[str, str]]  # ("paste", text) or ("keys", key name)
    prompts: list[str]
    env: dict[str, str] = field(default_factory=dict)


DELIVERIES = {
    # One trailing newline is stripped by paste(); the other newlines stay inside one prompt.
    "30-line-paste": Delivery([("paste", THIRTY_LINES + "\n"), ("keys", "Enter")], [THIRTY_LINES]),
    # The first Enter is dropped: the typed "x" joins the same draft.
    "dropped-enter": Delivery(
        [("paste", "hello"), ("keys", "Enter"), ("keys", "x"), ("keys", "Enter")],
        ["hellox"],
        {"ORCH_SCRIPTED_DROP_ENTERS": "1"},
    ),
    "c-u-clears-draft": Delivery(
        [("paste", "junk\nmore junk"), ("keys", "C-u"), ("paste", "good"), ("keys", "Enter")], ["good"]
    ),
    "two-prompts": Delivery(
        [("paste", "first"), ("keys", "Enter"), ("paste", "second"), ("keys", "Enter")], ["first", "second"]
    ),
}


@pytest.mark.parametrize("case", DELIVERIES.values(), ids=DELIVERIES.keys())
def test_delivery(server: TmuxServer, tmp_path: Path, case: Delivery) -> None:
    pane_id, spec = start_agent(server, tmp_path, **case.env)
    for kind, value in case.steps:
        if kind == "paste":
            server.paste(pane_id, value)
        else:
            server.send_keys(pane_id, value)
    wait_events(state_file(spec), "Stop", len(case.prompts))
    assert [e["prompt"] for e in events(state_file(spec), "UserPromptSubmit")] == case.prompts
    assert server._cmd("list-buffers") == []  # paste-buffer -d removed every buffer


def test_paste_runs_commands_and_capture_shows_placeholder(server: TmuxServer, tmp_path: Path) -> None:
    pane_id, spec = start_agent(server, tmp_path)
    server.paste(pane_id, THIRTY_LINES)
    wait_until(lambda: "[Pasted text #1 +30 lines]" in server.capture(pane_id), TIMEOUT, "the paste placeholder")
    server.send_keys(pane_id, "Enter")
    wait_events(state_file(spec), "Stop")
    names = [e["hook_event_name"] for e in events(state_file(spec))]
    assert names == ["SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"]
    assert (tmp_path / "pasted.txt").read_text() == "pasted-ok\n"


def test_capture_visible_screen_and_scrollback(server: TmuxServer, tmp_path: Path) -> None:
    pane_id, spec = start_agent(server, tmp_path)
    server.paste(pane_id, "$ seq 1 300")
    server.send_keys(pane_id, "Enter")
    wait_events(state_file(spec), "Stop")
    wait_until(lambda: "done: ran 1" in server.capture(pane_id), TIMEOUT, "the summary on screen")
    visible = server.capture(pane_id).splitlines()
    assert "300" in visible and "100" not in visible  # 70 rows: line 100 has scrolled off
    last = server.capture(pane_id, 250).splitlines()
    assert len(last) == 250 and "100" in last and last[-1] == "scripted>"  # capture trims trailing spaces


def test_first_prompt_from_argv_and_task_file(server: TmuxServer, tmp_path: Path) -> None:
    task = tmp_path / "w1.task.md"
    task.write_text("# Task\n$ echo from-task > task-out.txt\nnot a command\n")
    prompt = f"Read and follow the instructions in {task}. Then:\n$ echo from-argv > argv-out.txt"
    _, spec = start_agent(server, tmp_path, prompt)
    wait_events(state_file(spec), "Stop")
    assert (tmp_path / "argv-out.txt").read_text() == "from-argv\n"
    assert (tmp_path / "task-out.txt").read_text() == "from-task\n"
    assert len(events(state_file(spec), "PreToolUse")) == 2


def test_transcript_survives_kill(server: TmuxServer, tmp_path: Path) -> None:
    pane_id, spec = start_agent(server, tmp_path)
    folder = tmp_path / "odd 'dir' #1 $x"  # pipe-pane goes through sh and tmux format expansion
    folder.mkdir()
    transcript = folder / "w1.log"
    server.pipe_to(pane_id, transcript)
    server.pipe_to(pane_id, transcript)  # again: neither toggled off nor doubled
    server.paste(pane_id, "$ echo marker-$((6*7))")
    server.send_keys(pane_id, "Enter")
    wait_events(state_file(spec), "Stop")
    wait_until(lambda: "done: ran 1" in transcript.read_text(), TIMEOUT, "the transcript to catch up")
    server.kill()
    assert not server.alive()
    server.kill()  # already gone: no error
    assert transcript.read_text().count("marker-42") == 1


@dataclass
class Death:
    kill: str  # "/crash", "/exit" or "SIGKILL"
    status: int | None
    signal: int | None


DEATHS = {
    "exit-status-3": Death("/crash", 3, None),
    "clean-exit": Death("/exit", 0, None),
    "sigkill": Death("SIGKILL", None, 9),
}


@pytest.mark.parametrize("case", DEATHS.values(), ids=DEATHS.keys())
def test_dead_pane_remains_and_respawns(server: TmuxServer, tmp_path: Path, case: Death) -> None:
    pane_id, spec = start_agent(server, tmp_path)
    pid = server.pane(1).pid
    assert pid is not None and server.pane(1).current_command.startswith("python")
    if case.kill == "SIGKILL":
        os.kill(pid, signal.SIGKILL)
    else:
        server.paste(pane_id, case.kill)
        server.send_keys(pane_id, "Enter")
    dead = wait_pane(server, 1, dead=True)
    assert (dead.pane_id, dead.dead_status, dead.dead_signal, dead.pid) == (
        pane_id,
        case.status,
        case.signal,
        None,
    )
    assert len(events(state_file(spec), "SessionEnd")) == (1 if case.kill == "/exit" else 0)

    server.respawn(pane_id, spec)
    alive = wait_pane(server, 1, dead=False)
    assert (alive.pane_id, alive.worker, alive.dead_status) == (pane_id, 1, None)
    wait_events(state_file(spec), "SessionStart", 2)


def test_server_env_reaches_panes_but_no_command_line(server: TmuxServer, tmp_path: Path) -> None:
    secret = f"sk-test-{uuid.uuid4().hex}"
    w1 = agent_spec(tmp_path, 1, ORCH_ONLY_W1="one")
    w2 = agent_spec(tmp_path, 2)
    # The server's PATH differs from ours (orch run as .venv/bin/orch puts its bin dir first): every
    # pane gets the server's, though tmux would give a later pane the PATH of the client asking for it.
    path = f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"
    env = {**os.environ, "ORCH_TEST_SECRET": secret, "PATH": path}
    ids = {1: server.start("orch-test", w1, 1, env), 2: server.add_pane(w2, 2)}
    for n, spec in ((1, w1), (2, w2)):
        wait_ready(server, ids[n])
        server.paste(ids[n], f'$ printf "%s|%s|%s" "$ORCH_TEST_SECRET" "$ORCH_ONLY_W1" "$PATH" > env{n}.txt')
        server.send_keys(ids[n], "Enter")
        wait_events(state_file(spec), "Stop")
    assert (tmp_path / "env1.txt").read_text() == f"{secret}|one|{path}"
    assert (tmp_path / "env2.txt").read_text() == f"{secret}||{path}"  # -e values stay in their own pane
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes()
        except OSError:
            continue  # the process ended while we looked
        assert secret.encode() not in argv, f"secret on the command line of pid {cmdline.parent.name}"


def test_errors_are_one_line_sandbox_errors(server: TmuxServer, tmp_path: Path) -> None:
    assert not server.alive()
    server.kill()  # never started: fine
    with pytest.raises(SandboxError) as info:
        server.panes()
    assert "\n" not in info.value.one_line()
    start_agent(server, tmp_path)
    with pytest.raises(SandboxError, match=r"send-keys failed .*can't find pane"):
        server.send_keys("%999", "Enter")
    with pytest.raises(UsageError, match="empty command"):
        server.add_pane(LaunchSpec(argv=[]), 2)


FAKE_TMUX = {
    "missing": (None, "not installed"),
    "too-old": ("tmux 3.1c", "too old"),
    "garbled": ("what", "cannot read"),
}


@pytest.mark.parametrize(("version", "message"), FAKE_TMUX.values(), ids=FAKE_TMUX.keys())
def test_check_tmux_rejects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str | None, message: str) -> None:
    if version is not None:
        fake = tmp_path / "tmux"
        fake.write_text(f"#!/bin/sh\necho '{version}'\n")
        fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UsageError, match=message) as info:
        check_tmux()
    assert info.value.exit_code == 2
    assert info.value.one_line().endswith("(hint: apt-get install tmux)")


def test_check_tmux_accepts_installed() -> None:
    assert re.match(r"\d+\.\d+", check_tmux())

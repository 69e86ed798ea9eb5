"""The hook writer as agents run it: a separate process, the hook payload on stdin, its answer on stdout."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

import orch.run.hookwriter
from orch.agents.gemini import HOOK_DIALECT
from orch.run.records import HookEvent

GEMINI = ("dialect", json.dumps(dataclasses.asdict(HOOK_DIALECT)))
"""Gemini CLI's hooks: the hook writer's dialect mode, with the dialect its adapter passes."""
REQUEST = {"hook_event_name": "PermissionRequest", "tool_name": "WebFetch", "tool_input": {"url": "http://x/"}}


def hook(payload: Mapping[str, object] | str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    cmd = [sys.executable, "-S", orch.run.hookwriter.__file__, *map(str, args)]
    return subprocess.run(cmd, input=text, capture_output=True, text=True, timeout=30, check=False)


@pytest.mark.parametrize(
    ("policy", "decision"),
    [
        ('{"answer": "allow"}', {"behavior": "allow"}),
        ('{"answer": "deny", "message": "go on without it"}', {"behavior": "deny", "message": "go on without it"}),
        ('{"answer": "ask"}', None),
        (None, None),  # no policy file: orch up without orch run
        ("not json {", None),  # a worker wrote garbage into it: the dialog shows, nothing breaks
        ('["allow"]', None),
        ('{"answer": "yes please"}', None),
    ],
    ids=["allow", "deny", "ask", "missing", "garbage", "not-a-mapping", "unknown-answer"],
)
def test_permission_requests_are_answered_from_the_policy_file(
    tmp_path: Path, policy: str | None, decision: dict[str, str] | None
) -> None:
    state, policy_file = tmp_path / "agent-1.jsonl", tmp_path / "permissions.json"
    if policy is not None:
        policy_file.write_text(policy)
    out = hook(REQUEST, "event", state, policy_file)
    assert out.returncode == 0 and out.stderr == ""
    (line,) = state.read_text().splitlines()
    event = HookEvent.model_validate_json(line)
    assert event.hook_event_name == "PermissionRequest" and event.tool_name == "WebFetch"
    if decision is None:  # Claude Code shows its dialog
        assert out.stdout == "" and event.orch_decision is None
        return
    answer = json.loads(out.stdout)
    assert answer == {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": decision}}
    assert event.orch_decision == decision["behavior"]


def test_other_events_are_only_logged(tmp_path: Path) -> None:
    state, policy_file = tmp_path / "agent-1.jsonl", tmp_path / "permissions.json"
    policy_file.write_text('{"answer": "allow"}')
    out = hook({"hook_event_name": "PreToolUse", "tool_name": "Bash"}, "event", state, policy_file)
    assert out.returncode == 0 and out.stdout == ""
    assert HookEvent.model_validate_json(state.read_text()).orch_decision is None


@pytest.mark.parametrize(
    ("payload", "name"), [("{not json", "unparseable"), ("[1, 2]", "unknown"), ("", "unknown")], ids=str
)
def test_garbage_payloads_are_logged_never_fatal(tmp_path: Path, payload: str, name: str) -> None:
    state = tmp_path / "agent-1.jsonl"
    out = hook(payload, "event", state)
    assert out.returncode == 0
    assert HookEvent.model_validate_json(state.read_text()).hook_event_name == name


def test_a_vanished_run_folder_never_blocks_the_agent(tmp_path: Path) -> None:
    out = hook(REQUEST, "event", tmp_path / "gone" / "agent-1.jsonl", tmp_path / "gone" / "permissions.json")
    assert out.returncode == 0 and out.stdout == "" and "orch hookwriter:" in out.stderr


@pytest.mark.parametrize("args", [[], ["event"], ["status", "a", "b"], ["shout", "a"]], ids=str)
def test_bad_usage_prints_the_usage(args: list[str]) -> None:
    out = hook({}, *args)
    assert out.returncode == 2 and "hookwriter.py event STATE_FILE" in out.stderr


# --- Gemini CLI's hooks ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("payload", "name", "notice"),
    [
        ({"hook_event_name": "SessionStart", "source": "startup"}, "SessionStart", None),
        ({"hook_event_name": "BeforeAgent", "prompt": "hi"}, "UserPromptSubmit", None),
        ({"hook_event_name": "AfterAgent", "prompt_response": "x" * 9000}, "Stop", None),
        ({"hook_event_name": "BeforeTool", "tool_name": "run_shell_command"}, "PreToolUse", None),
        ({"hook_event_name": "AfterTool", "tool_name": "write_file", "tool_response": {"a": 1}}, "PostToolUse", None),
        (
            {"hook_event_name": "Notification", "notification_type": "ToolPermission"},
            "PermissionRequest",
            "permission_prompt",
        ),
        ({"hook_event_name": "Notification", "notification_type": "Other"}, "Notification", "Other"),
        ({"hook_event_name": "SessionEnd", "reason": "exit"}, "SessionEnd", None),
        ({"hook_event_name": "PreCompress"}, "PreCompress", None),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_gemini_events_are_logged_under_orchs_names(
    tmp_path: Path, payload: dict[str, object], name: str, notice: str | None
) -> None:
    state = tmp_path / "agent-1.jsonl"
    out = hook(payload, *GEMINI, state)
    assert out.returncode == 0 and out.stdout == ""
    event = HookEvent.model_validate_json(state.read_text())
    assert (event.hook_event_name, event.notification_type) == (name, notice)
    extra = event.model_extra or {}
    assert extra["agent_event"] == payload["hook_event_name"]
    assert "prompt_response" not in extra and "tool_response" not in extra  # big fields are dropped


@pytest.mark.parametrize(
    ("policy", "tool", "denied"),
    [
        ('{"answer": "deny", "message": "not here"}', "web_fetch", True),
        ('{"answer": "deny", "message": "not here"}', "run_shell_command", False),  # allowed without a prompt
        ('{"answer": "allow"}', "web_fetch", False),  # Gemini CLI's hook cannot approve: the prompt shows
        ('{"answer": "ask"}', "web_fetch", False),
        ("garbage", "web_fetch", False),
        (None, "web_fetch", False),
    ],
)
def test_gemini_before_tool_denies_from_the_policy_file(
    tmp_path: Path, policy: str | None, tool: str, denied: bool
) -> None:
    state, policy_file = tmp_path / "agent-1.jsonl", tmp_path / "permissions.json"
    if policy is not None:
        policy_file.write_text(policy)
    out = hook({"hook_event_name": "BeforeTool", "tool_name": tool}, *GEMINI, state, policy_file, "run_shell_command")
    assert out.returncode == 0
    event = HookEvent.model_validate_json(state.read_text())
    if denied:
        assert json.loads(out.stdout) == {"decision": "deny", "reason": "not here"}
        assert (event.hook_event_name, event.orch_decision, event.tool_name) == ("PermissionRequest", "deny", tool)
    else:
        assert out.stdout == "" and event.hook_event_name == "PreToolUse" and event.orch_decision is None


def test_gemini_permission_notice_names_the_tool_the_dialog_is_for(tmp_path: Path) -> None:
    state = tmp_path / "agent-1.jsonl"
    hook({"hook_event_name": "BeforeTool", "tool_name": "web_fetch"}, *GEMINI, state)
    state.write_text(state.read_text() + "torn {line\n")  # a worker can write anything here: never fatal
    notice = {"hook_event_name": "Notification", "notification_type": "ToolPermission", "details": {"type": "info"}}
    assert hook(notice, *GEMINI, state).returncode == 0
    event = HookEvent.model_validate_json(state.read_text().splitlines()[-1])
    assert (event.hook_event_name, event.tool_name, event.orch_decision) == ("PermissionRequest", "web_fetch", None)


def test_dialect_mode_checks_its_arguments(tmp_path: Path) -> None:
    assert hook({}, *GEMINI, tmp_path / "a.jsonl", tmp_path / "p.json").returncode == 2  # policy without tools
    for bad in ("not json", "[1]"):  # a dialect is one JSON object
        assert hook({}, "dialect", bad, tmp_path / "a.jsonl").returncode == 2
    assert not (tmp_path / "a.jsonl").exists()


def test_the_gemini_adapters_hooks_speak_its_dialect(tmp_path: Path) -> None:
    """The hook commands Gemini CLI runs carry the dialect its adapter states (the hook writer knows none)."""
    command = HOOK_DIALECT.command(tmp_path / "agent-1.jsonl")
    mode, dialect, state = shlex.split(command)[4:7]  # after `python -S -c START`: the writer's arguments
    assert (mode, json.loads(dialect), state) == ("dialect", json.loads(GEMINI[1]), str(tmp_path / "agent-1.jsonl"))


def test_gemini_approver_presses_allow_on_the_dialog_in_its_pane(tmp_path: Path) -> None:
    """The detached approver (policy allow): waits for the dialog in its own pane, presses Enter, sees it go."""
    state = tmp_path / "agent-1.jsonl"
    dialog = "echo '● 1. Allow once'; read answer; clear; echo answered; exec cat"
    tmux = ["tmux", "-L", "approve", "-f", "/dev/null"]
    subprocess.run([*tmux, "new-session", "-d", "-s", "a", "-x", "80", "-y", "10", dialog], check=True)
    try:
        pane = subprocess.run([*tmux, "display", "-p", "-t", "a", "#{pane_id}"], capture_output=True, text=True)
        socket = subprocess.run([*tmux, "display", "-p", "#{socket_path}"], capture_output=True, text=True)
        env = {"PATH": os.environ["PATH"], "TMUX_PANE": pane.stdout.strip(), "TMUX": f"{socket.stdout.strip()},0,0"}
        cmd = [
            sys.executable,
            "-S",
            orch.run.hookwriter.__file__,
            "approve",
            str(state),
            "web_fetch",
            HOOK_DIALECT.dialog,
        ]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30, check=False)
        screen = subprocess.run([*tmux, "capture-pane", "-p", "-t", "a"], capture_output=True, text=True).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, check=False)
    assert done.returncode == 0 and "answered" in screen
    assert not state.exists()  # nothing to correct: the prompt was answered


def test_a_refused_tool_result_is_marked_and_read_back(tmp_path: Path) -> None:
    """The tool result is dropped, its refusal kept: the controller's only record of a scripted agent's refused
    writes (orch.jobs.findings.hook_denied_writes); a result that says nothing of the kind is not marked."""
    from orch.contracts import ShellTool
    from orch.jobs.findings import hook_denied_writes

    bash, state = ShellTool(name="Bash", command_field="command"), tmp_path / "agent-1.jsonl"
    for command, output in (("echo x > /run/f", "sh: 1: cannot create /run/f: Read-only file system"), ("ls", "a")):
        payload: dict[str, object] = {
            "hook_event_name": "PostToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": command},
            "tool_response": {"exit_code": 2, "output": output},
        }
        assert hook(payload, "event", state).returncode == 0
    events = [HookEvent.model_validate_json(line) for line in state.read_text().splitlines()]
    assert [(e.model_extra or {}).get("tool_denied") for e in events] == [True, None]
    assert all("tool_response" not in (e.model_extra or {}) for e in events)
    assert hook_denied_writes(events, 0.0, bash) == ["echo x > /run/f"]
    assert hook_denied_writes(events, events[-1].ts + 1, bash) == []

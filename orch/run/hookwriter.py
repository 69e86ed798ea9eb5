"""Hook commands run by agents; they write the worker's state into the run folder.

Started with `python3 -S`, so it imports only the standard library and starts fast: agents run it on every hook
event. Their hook commands import it from its folder (orch.agents.base.HOOK_START: its compiled file, not the
source compiled at every start); `python3 -S /path/to/hookwriter.py ...` runs it as a script alike.

    hookwriter.py event STATE_FILE [POLICY_FILE]  # hook payload on stdin -> one JSON line appended
    hookwriter.py dialect DIALECT STATE_FILE [POLICY_FILE TOOLS]  # another agent's hook, logged under orch's names
    hookwriter.py approve STATE_FILE TOOL DIALOG [PANE_SOCKET]  # (detached, by the above) press Enter on its
                                                               # permission dialog

DIALECT is the agent's hook dialect as one JSON object (orch.agents.base.HookDialect, from its adapter: this
script knows no agent): `events` and `notifications` rename its names to orch's (Claude Code's),
`permission_notice` is the notification that says its permission dialog is up, `gate` the event whose hook
may deny a tool call, and `dialog` the text of that dialog with its allow-once option preselected;
`pane_socket`, under local strict isolation, the relay's socket for the worker's own pane (`pane_request`),
which the approver uses instead of the run's tmux server (out of a sandbox's reach).

With POLICY_FILE (the PermissionRequest hook), a permission prompt is answered from that file,
`{"answer": "allow"}` or `{"answer": "deny", "message": "..."}`, so no dialog ever blocks the worker;
no file, or `{"answer": "ask"}`, leaves the dialog on screen. The answer is logged with the event.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing's import is a third of this script's start: for the type checker alone
    from typing import Any

# Big fields are cut so a state line stays one small atomic append.
MAX_FIELD = 4000
DROPPED = ("tool_response", "transcript_path", "last_assistant_message", "prompt_response")
APPROVE_TIMEOUT = 15.0
DENIED = re.compile(r"Permission denied|Read-only file system|Operation not permitted")
"""What a tool's result says when the system refused it a write (a sandbox's read-only mount, a file's mode)."""


def slim(payload: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"ts": time.time()}
    for key, value in payload.items():
        if key == "tool_response" and DENIED.search(json.dumps(value)):
            # The result itself is dropped (big), but a refusal is kept: with no model behind the agent (orch's
            # scripted agent) the hook log is the only place the controller sees it (orch.jobs.findings).
            out["tool_denied"] = True
        if key in DROPPED:
            continue
        if key in ("tool_input", "details"):
            value = json.dumps(value)[:MAX_FIELD]
        elif isinstance(value, str) and len(value) > MAX_FIELD:
            value = value[:MAX_FIELD]
        out[key] = value
    out.setdefault("hook_event_name", "unknown")
    return out


def permission_answer(policy_file: str) -> dict[str, str] | None:
    """The decision the policy file gives (Claude Code's PermissionRequest hook output), or None: ask."""
    try:
        with open(policy_file, encoding="utf-8") as fh:
            policy = json.load(fh)
    except (OSError, ValueError):
        return None
    answer = policy.get("answer") if isinstance(policy, dict) else None
    if answer == "allow":
        return {"behavior": "allow"}
    if answer == "deny":
        return {"behavior": "deny", "message": str(policy.get("message") or "denied by the run's policy")}
    return None


def append_event(state_file: str, payload: dict[str, Any]) -> None:
    # ensure_ascii: no raw U+2028 or U+0085 of a tool's input, which a reader's splitlines() would cut the line at
    # (orch.escape.json_line; this script imports nothing of orch, to start fast).
    line = (json.dumps(slim(payload)) + "\n").encode()
    fd = os.open(state_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def last_tool(state_file: str) -> str | None:
    """The tool of the worker's latest PreToolUse (a permission notice may not name it: Gemini CLI's)."""
    try:
        with open(state_file, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - 16384))
            lines = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("hook_event_name") == "PreToolUse":
            tool = event.get("tool_name")
            return tool if isinstance(tool, str) else None
    return None


def start_approver(state_file: str, payload: dict[str, Any], dialog: str, pane_socket: str = "") -> bool:
    """The agent's hooks cannot approve a call (Gemini CLI's), and it draws the dialog only after this hook
    returns: a detached process waits for the dialog in this pane and presses Enter on its preselected
    allow-once option (through `pane_socket` when given: a sandbox reaches no tmux server)."""
    if not (pane_socket or os.environ.get("TMUX_PANE")):
        return False
    import subprocess  # here, not at the top: every hook of every agent would pay for its import

    tool = str(payload.get("tool_name") or "")
    argv = [sys.executable, "-S", os.path.abspath(__file__), "approve", state_file, tool, dialog]
    argv += [pane_socket] if pane_socket else []
    try:
        subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:
        return False
    return True


PANE_TIMEOUT = 10.0
MAX_SCREEN = 1 << 20


def pane_request(socket_path: str, request: dict[str, str]) -> dict[str, Any]:
    """One request on the relay's socket for this worker's own pane (orch.backends.local.relay): `{"op": "screen"}`,
    `{"op": "paste", "text": ...}` or `{"op": "enter"}`; its answer, `{}` when it is gone or refused."""
    import socket

    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(PANE_TIMEOUT)
            sock.connect(socket_path)
            sock.sendall(json.dumps(request).encode() + b"\n")
            answer = json.loads(sock.makefile("rb").readline(MAX_SCREEN) or b"{}")
    except (OSError, ValueError):
        return {}
    return answer if isinstance(answer, dict) else {}


def _screen(pane: str, pane_socket: str) -> str:
    if pane_socket:
        return str(pane_request(pane_socket, {"op": "screen"}).get("screen", ""))
    import subprocess

    done = subprocess.run(["tmux", "capture-pane", "-p", "-t", pane], capture_output=True, text=True, check=False)
    return done.stdout if done.returncode == 0 else ""


def _enter(pane: str, pane_socket: str) -> None:
    if pane_socket:
        pane_request(pane_socket, {"op": "enter"})
        return
    import subprocess

    subprocess.run(["tmux", "send-keys", "-t", pane, "Enter"], capture_output=True, check=False)


def approve(state_file: str, tool: str, dialog: str, pane_socket: str = "") -> bool:
    """Press Enter on the agent's permission dialog once `dialog` shows in this pane, then see it go; if it
    does not show or stay gone within APPROVE_TIMEOUT, log the prompt as unanswered (the worker waits)."""
    pane = os.environ.get("TMUX_PANE", "")
    deadline = time.monotonic() + APPROVE_TIMEOUT
    pressed = False
    while time.monotonic() < deadline:
        shown = dialog in _screen(pane, pane_socket)
        if pressed and not shown:
            return True
        if shown and not pressed:
            _enter(pane, pane_socket)
            pressed = True
        time.sleep(0.1)  # polling the screen, bounded by the deadline
    payload = {"hook_event_name": "PermissionRequest", "tool_name": tool or None, "agent_event": "orch-approve"}
    append_event(state_file, {**payload, "notification_type": "permission_prompt"})
    return False


def dialect_event(
    payload: dict[str, Any], state_file: str, policy_file: str | None, allowed: set[str], dialect: dict[str, Any]
) -> dict[str, Any] | None:
    """Rename a hook payload in the agent's dialect in place to orch's event names; the hook's JSON answer, if any.

    Gemini CLI's BeforeTool hook (its `gate`) runs before its policy check and can deny a call (no dialog) but
    not approve one. So a tool outside `allowed` (the calls the adapter's policy lets through without a
    prompt) is denied here when the run's policy says deny, and logged as a PermissionRequest with that
    decision; under ask the prompt shows, and its `permission_notice` is logged as a PermissionRequest with no
    decision: the worker waits. Under allow, that notice starts the approver (`start_approver`) and is
    logged with decision allow."""
    name = str(payload.get("hook_event_name", "unknown"))
    payload["agent_event"] = name
    payload["hook_event_name"] = dialect.get("events", {}).get(name, name)
    kind = payload.get("notification_type")
    if name == "Notification" and isinstance(kind, str):
        payload["notification_type"] = dialect.get("notifications", {}).get(kind, kind)
        if kind and kind == dialect.get("permission_notice"):  # the dialog is up: an unanswered PermissionRequest
            payload["hook_event_name"] = "PermissionRequest"
            payload.setdefault("tool_name", last_tool(state_file))
            decision = permission_answer(policy_file) if policy_file else None
            dialog = str(dialect.get("dialog") or "")
            allow = decision is not None and decision["behavior"] == "allow"
            pane_socket = str(dialect.get("pane_socket") or "")
            if allow and dialog and start_approver(state_file, payload, dialog, pane_socket):
                payload["orch_decision"] = "allow"
    if name != dialect.get("gate") or policy_file is None or payload.get("tool_name") in allowed:
        return None
    decision = permission_answer(policy_file)
    if decision is None or decision["behavior"] != "deny":
        return None
    payload["hook_event_name"] = "PermissionRequest"
    payload["orch_decision"] = "deny"
    return {"decision": "deny", "reason": decision["message"]}


def log_event(payload: dict[str, Any], state_file: str, policy_file: str | None) -> dict[str, Any] | None:
    """Log one of Claude Code's hook events; the hook's answer, if any: a PermissionRequest answered from the
    run's policy file (`policy_file`: only its PermissionRequest hook is given one). The relay's HTTP hooks
    (orch.backends.local.httphooks) log and answer through here too."""
    decision = None
    if policy_file is not None and payload.get("hook_event_name") == "PermissionRequest":
        decision = permission_answer(policy_file)
        if decision is not None:
            payload["orch_decision"] = decision["behavior"]
    append_event(state_file, payload)
    if decision is None:
        return None
    return {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": decision}}


def parse_dialect(text: str) -> dict[str, Any] | None:
    try:
        dialect = json.loads(text)
    except ValueError:
        return None
    return dialect if isinstance(dialect, dict) else None


def name_process(mode: str) -> None:
    """Name this process for what it is (ps, top and the kernel's accounting show `orch-hook`, not python3)."""
    try:
        with open("/proc/self/comm", "w") as fh:
            fh.write(f"orch-{'approve' if mode == 'approve' else 'hook'}")
    except OSError:
        pass


def main(argv: list[str]) -> int:
    shapes = {"event": (3, 4), "dialect": (4, 6), "approve": (5, 6)}
    dialect = parse_dialect(argv[2]) if len(argv) > 2 and argv[1] == "dialect" else {}
    if len(argv) < 2 or len(argv) not in shapes.get(argv[1], ()) or dialect is None:
        print(__doc__, file=sys.stderr)
        return 2
    name_process(argv[1])
    if argv[1] == "approve":
        return 0 if approve(argv[2], argv[3], argv[4], argv[5] if len(argv) == 6 else "") else 1
    try:
        payload = json.loads(sys.stdin.read() or "{}")
        if not isinstance(payload, dict):
            payload = {"hook_event_name": "unknown"}
    except ValueError:
        payload = {"hook_event_name": "unparseable"}
    try:
        if argv[1] == "dialect" and dialect is not None:
            allowed = set(argv[5].split(",")) if len(argv) == 6 else set()
            answer = dialect_event(payload, argv[3], argv[4] if len(argv) == 6 else None, allowed, dialect)
            append_event(argv[3], payload)
            if answer is not None:
                print(json.dumps(answer))
        elif argv[1] == "event":
            answer = log_event(payload, argv[2], argv[3] if len(argv) == 4 else None)
            if answer is not None:  # printed last: the event is logged even if the agent ignores it
                print(json.dumps(answer))
    except OSError as exc:  # never block the agent because the run folder went away
        print(f"orch hookwriter: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

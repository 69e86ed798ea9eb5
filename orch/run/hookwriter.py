"""Hook and status-line commands run by agents; they write the worker's state into the run folder.

Run as a plain script (`python3 /path/to/hookwriter.py ...`), so it imports only the standard library
and starts fast: agents run it on every hook event.

    hookwriter.py event STATE_FILE [POLICY_FILE]  # hook payload on stdin -> one JSON line appended
    hookwriter.py status STATUS_FILE              # status-line payload on stdin -> atomic JSON, prints a label

With POLICY_FILE (the PermissionRequest hook), a permission prompt is answered from that file,
`{"answer": "allow"}` or `{"answer": "deny", "message": "..."}`, so no dialog ever blocks the worker;
no file, or `{"answer": "ask"}`, leaves the dialog on screen. The answer is logged with the event.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from typing import Any

# Big fields are cut so a state line stays one small atomic append.
MAX_FIELD = 4000
DROPPED = ("tool_response", "transcript_path", "last_assistant_message")


def slim(payload: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"ts": time.time()}
    for key, value in payload.items():
        if key in DROPPED:
            continue
        if key == "tool_input":
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
    line = (json.dumps(slim(payload), ensure_ascii=False) + "\n").encode()
    fd = os.open(state_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def write_status(status_file: str, payload: dict[str, Any]) -> str:
    cost = payload.get("cost") or {}
    ctx = payload.get("context_window") or {}
    record = {
        "ts": time.time(),
        "session_id": payload.get("session_id"),
        "cost_usd": cost.get("total_cost_usd"),
        "duration_ms": cost.get("total_duration_ms"),
        "context_used_percent": ctx.get("used_percentage"),
    }
    folder = os.path.dirname(status_file) or "."
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".status.")
    with os.fdopen(fd, "w") as fh:
        json.dump(record, fh)
    os.chmod(tmp, 0o644)
    os.replace(tmp, status_file)
    # Run as a bare script (no orch on sys.path): reads ORCH_WORKER itself; declared in orch/settings.py.
    worker = os.environ.get("ORCH_WORKER", "?")
    usd = record["cost_usd"]
    return f"orch W{worker}" + (f" ${usd:.4f}" if isinstance(usd, int | float) else "")


def main(argv: list[str]) -> int:
    if not (len(argv) == 3 or (len(argv) == 4 and argv[1] == "event")) or argv[1] not in ("event", "status"):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        payload = json.loads(sys.stdin.read() or "{}")
        if not isinstance(payload, dict):
            payload = {"hook_event_name": "unknown"}
    except ValueError:
        payload = {"hook_event_name": "unparseable"}
    try:
        if argv[1] == "event":
            decision = None
            if len(argv) == 4 and payload.get("hook_event_name") == "PermissionRequest":
                decision = permission_answer(argv[3])
                if decision is not None:
                    payload["orch_decision"] = decision["behavior"]
            append_event(argv[2], payload)
            if decision is not None:  # printed last: the event is logged even if the agent ignores it
                print(json.dumps({"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": decision}}))
        else:
            print(write_status(argv[2], payload))
    except OSError as exc:  # never block the agent because the run folder went away
        print(f"orch hookwriter: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

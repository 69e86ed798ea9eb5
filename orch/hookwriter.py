"""Hook and status-line commands run by agents; they write the worker's state into the run folder.

Run as a plain script (`python3 /path/to/hookwriter.py ...`), so it imports only the standard library
and starts fast: agents run it on every hook event.

    hookwriter.py event STATE_FILE        # hook payload on stdin -> one JSON line appended
    hookwriter.py status STATUS_FILE      # status-line payload on stdin -> atomic JSON, prints a label
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
    worker = os.environ.get("ORCH_WORKER", "?")
    usd = record["cost_usd"]
    return f"orch W{worker}" + (f" ${usd:.4f}" if isinstance(usd, int | float) else "")


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("event", "status"):
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
            append_event(argv[2], payload)
        else:
            print(write_status(argv[2], payload))
    except OSError as exc:  # never block the agent because the run folder went away
        print(f"orch hookwriter: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

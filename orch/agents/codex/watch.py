"""The hook Codex lacks: a turn it gives up on after API errors fires no Stop and no StopFailure (the pinned
version ignores StopFailure in hooks.json), so the worker would read as busy until its job timed out. Codex does
record the failure in its own session log (`$CODEX_HOME/sessions/**/rollout-*.jsonl`): an `event_msg` of
type `task_complete` with an `error`. This watcher, started beside Codex in its pane, turns each such line
into a StopFailure hook event under the error names Claude Code uses (orch.fleet.workerstate), so the
controller waits and continues, or fails the job, as it does for Claude Code.

    python3 -S watch.py HOOKWRITER STATE_FILE CODEX_HOME

Plain script, standard library only (plus the hook writer beside it). Session logs that exist when it
starts (a resumed worker's) are read from their end. It exits when Codex does (its parent: the pane's
shell execs Codex).
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import re
import sys
import time
from typing import Any

POLL = 0.5  # seconds between looks at the session logs: a failed turn is noticed within this
MESSAGE_CHARS = 300
_URL = re.compile(r"https?://\S+")  # Codex's messages carry the request URL, and with it the worker's token


def error_name(info: object) -> str:
    """Codex's `codex_error_info` as the error names orch's worker states know (Claude Code's StopFailure)."""
    if isinstance(info, dict) and info:
        detail = next(iter(info.values()))
        status = detail.get("http_status_code") if isinstance(detail, dict) else None
        if isinstance(status, int):
            if status == 429:
                return "rate_limit"
            if status in (401, 403):
                return "authentication_failed"
            if status == 402:
                return "billing_error"
            if status in (503, 529):
                return "overloaded"
            if 400 <= status < 500:
                return "invalid_request"
            return "server_error"
        info = next(iter(info))
    return {
        "internal_server_error": "server_error",
        "server_overloaded": "overloaded",
        "usage_limit_exceeded": "rate_limit",
        "unauthorized": "authentication_failed",
        "bad_request": "invalid_request",
        "context_window_exceeded": "invalid_request",
    }.get(str(info), "unknown")


def failure(line: str) -> dict[str, Any] | None:
    """The StopFailure event a session-log line stands for, or None."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("type") != "event_msg":
        return None
    payload = record.get("payload")
    if not isinstance(payload, dict) or payload.get("type") != "task_complete":
        return None
    error = payload.get("error")
    if not isinstance(error, dict):
        return None
    message = _URL.sub("<url>", str(error.get("message") or ""))[:MESSAGE_CHARS]
    return {
        "hook_event_name": "StopFailure",
        "error": error_name(error.get("codex_error_info")),
        "error_details": message,
        "turn_id": payload.get("turn_id"),
    }


class Logs:
    """New complete lines of every session log under CODEX_HOME/sessions."""

    def __init__(self, home: str) -> None:
        self.pattern = os.path.join(home, "sessions", "**", "rollout-*.jsonl")
        self.offsets = {path: os.path.getsize(path) for path in glob.glob(self.pattern, recursive=True)}

    def read(self) -> list[str]:
        lines: list[str] = []
        for path in glob.glob(self.pattern, recursive=True):
            offset = self.offsets.get(path, 0)
            try:
                if os.path.getsize(path) <= offset:
                    continue
                with open(path, "rb") as fh:
                    fh.seek(offset)
                    chunk = fh.read()
            except OSError:
                continue
            complete = chunk[: chunk.rfind(b"\n") + 1]
            self.offsets[path] = offset + len(complete)
            lines += complete.decode("utf-8", errors="replace").splitlines()
        return lines


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    hookwriter_path, state, home = argv[1:]
    spec = importlib.util.spec_from_file_location("orch_hookwriter", hookwriter_path)
    assert spec is not None and spec.loader is not None
    hookwriter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hookwriter)
    parent = os.getppid()
    logs = Logs(home)
    while os.getppid() == parent:
        time.sleep(POLL)
        for line in logs.read():
            event = failure(line)
            if event is not None:
                hookwriter.append_event(state, event)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

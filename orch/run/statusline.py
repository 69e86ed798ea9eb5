"""A worker's status line, read: Claude Code's own payload as its status command saved it whole (a shell's copy,
orch.agents.claude.status_command: no Python per refresh), or a record in StatusLine's own shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orch.run.files import UnsafeOutput, read_worker_file
from orch.run.records import StatusLine

LIMIT = 64 << 10
"""Bytes of a status line read at most: Claude Code's payload is a few KiB."""


def read_status_line(path: Path) -> StatusLine | None:
    """The status line at `path`, None if there is none to read. The file is the worker's: a link, a FIFO or a
    big one reads as none (the controller and the view read it often)."""
    try:
        data = json.loads(read_worker_file(path, LIMIT))
        if isinstance(data, dict) and "ts" not in data:
            data = payload_fields(data, path.lstat().st_mtime)
        return StatusLine.model_validate(data)
    except (OSError, ValueError, ValidationError, UnsafeOutput):
        return None


def payload_fields(payload: dict[str, Any], ts: float) -> dict[str, Any]:
    """StatusLine's fields from Claude Code's status-line payload; `ts`: when it was saved."""
    cost, window = payload.get("cost"), payload.get("context_window")
    cost = cost if isinstance(cost, dict) else {}
    window = window if isinstance(window, dict) else {}
    return {
        "ts": ts,
        "session_id": payload.get("session_id"),
        "cost_usd": cost.get("total_cost_usd"),
        "duration_ms": cost.get("total_duration_ms"),
        "context_used_percent": window.get("used_percentage"),
    }

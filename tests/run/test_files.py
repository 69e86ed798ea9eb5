"""How the run folder's files are read (orch/run/files.py): a JSONL log read incrementally, complete lines only."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network


def test_hook_log_reads_only_new_complete_lines(tmp_path: Path) -> None:
    from orch.run.files import JsonlTail
    from orch.run.records import HookEvent

    path = tmp_path / "agent-1.jsonl"
    log = JsonlTail(path, HookEvent)
    assert log.records() == []
    path.write_text('{"ts": 1, "hook_event_name": "SessionStart"}\n{"ts": 2, "hook_event_na')
    assert [e.hook_event_name for e in log.records()] == ["SessionStart"]
    with path.open("a") as fh:
        fh.write('me": "Stop"}\nnot json\n')
    assert [e.hook_event_name for e in log.records()] == ["SessionStart", "Stop"]

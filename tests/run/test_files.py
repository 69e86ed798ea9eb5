"""How the run folder's files are read (orch/run/files.py): a JSONL log read incrementally, complete lines only."""

from __future__ import annotations

from pathlib import Path

import pytest

from orch.run.files import merged_log

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


def _line(ts: str, event: str) -> bytes:
    return f'{{"ts":"{ts}","event":"{event}","worker":null,"data":{{}}}}\n'.encode()


def test_a_log_copied_back_keeps_this_sides_own_lines_in_time_order() -> None:
    created, relaunch = (
        _line("2026-12-06T10:00:00.5Z", "run-created"),
        _line("2026-12-06T10:05:00Z", "fleet-relaunching"),
    )
    theirs = [_line(f"2026-12-06T10:0{n}:00Z", f"e{n}") for n in range(4)]
    here = theirs[0] + created + theirs[1] + relaunch  # what this side had: a pull, its own line, a pull, its own
    there = b"".join(theirs)  # their copy since: every line of theirs, none of this side's
    assert merged_log(here, there) == theirs[0] + created + theirs[1] + theirs[2] + theirs[3] + relaunch
    assert merged_log(there, there) == there and merged_log(b"", there) == there
    assert merged_log(created + b'{"ts": "torn', there) == theirs[0] + created + b"".join(theirs[1:])
    torn = there + b'{"ts":"2026-12-06T10:09'
    assert merged_log(relaunch, torn) == there + relaunch + b'{"ts":"2026-12-06T10:09'  # their torn line stays last

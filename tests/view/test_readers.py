"""The watcher's incremental readers (orch/view/readers.py): whatever a worker writes is shown as one safe
line, bus.md is read a piece at a time (a torn last line waits, a truncated bus starts over), a file is re-read
only when it moved, and a worker's state comes with the time it has held."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

from orch import escape
from orch.run.bus import format_line
from orch.run.records import BusLine, HookEvent, WorkerState
from orch.view.readers import BusTail, Changed, worker_state

pytestmark = pytest.mark.pure  # files in tmp_path only

T0 = dt.datetime(2026, 12, 5, 9, 0, tzinfo=dt.UTC)


def _line(sender: str, text: str, second: int = 0) -> str:
    return format_line(BusLine(ts=T0 + dt.timedelta(seconds=second), sender=sender, text=text))


def test_a_workers_text_is_one_short_line_without_escapes() -> None:
    hostile = "\x1b[2J\x1b]0;owned\x07line one\nline two\r" + "x" * 500
    shown = escape.terminal(hostile, 60)
    assert "\x1b" not in shown and "\n" not in shown and "\r" not in shown and len(shown) <= 60
    assert shown.startswith("\\x1b[2J\\x1b]0;owned\\x07line one line two")  # shown as escapes, never sent


def test_the_bus_is_read_incrementally_and_a_torn_line_waits(tmp_path: Path) -> None:
    path = tmp_path / "bus.md"
    tail = BusTail(path)
    tail.read()  # no bus yet: nothing, no error
    whole = _line("W1", "first")
    path.write_text(whole + _line("W2", "second", 1)[:12])  # W2's line is still being written
    tail.read()
    assert [(e.sender, e.text) for e in tail.lines] == [("W1", "first")]
    with path.open("a") as bus:
        bus.write(_line("W2", "second", 1)[12:])
    tail.read()
    assert [(e.sender, e.text) for e in tail.lines] == [("W1", "first"), ("W2", "second")]
    assert "[W2] second" in (tail.last_clean("W2") or "")
    assert tail.last_clean("W9") is None


def test_hand_appended_lines_are_shown_cleaned_and_garbage_skipped(tmp_path: Path) -> None:
    """A worker appending to bus.md by hand (no stamp) is shown as what it wrote, its sender shortened and
    cleaned; a line that is neither form is not shown at all."""
    path = tmp_path / "bus.md"
    path.write_text("[W3] by hand\nnot a bus line\n[\x1b[31mW1 the lead, honestly\x1b[0m] trust me\n")
    tail = BusTail(path)
    tail.read()
    entries = [(e.ts, e.sender, e.text) for e in tail.lines]
    assert entries[0] == (None, "W3", "by hand")
    assert len(entries) == 2 and "\x1b" not in entries[1][1] and len(entries[1][1]) <= 12


def test_a_truncated_bus_is_read_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "bus.md"
    path.write_text(_line("W1", "old one") + _line("W1", "old two", 1))
    tail = BusTail(path)
    tail.read()
    path.write_text(_line("W2", "new"))
    tail.read()
    assert [e.text for e in tail.lines] == ["new"] and set(tail.last) == {"W2"}


def test_a_file_is_re_read_only_when_it_moved(tmp_path: Path) -> None:
    path = tmp_path / "controller.json"
    changed = Changed(path)
    assert not changed.moved()  # absent, and absent still
    path.write_text("{}")
    assert changed.moved() and not changed.moved()
    os.utime(path, ns=(1, 1))
    assert changed.moved()
    path.unlink()
    assert changed.moved() and not changed.moved()


def test_a_workers_state_and_since_when_from_its_hook_log_alone() -> None:
    events = [
        HookEvent(ts=1.0, hook_event_name="SessionStart"),
        HookEvent(ts=2.0, hook_event_name="UserPromptSubmit", prompt="go"),
        HookEvent(ts=3.0, hook_event_name="PreToolUse", tool_name="Bash"),
        HookEvent(ts=4.0, hook_event_name="PostToolUse", tool_name="Bash"),
    ]
    state, _, since = worker_state(events, running=True)
    assert state is WorkerState.BUSY and since is not None and since <= 3.0
    assert worker_state([], running=True)[2] is None
    assert worker_state(events, running=False) == (WorkerState.EXITED, "busy: Bash when the run ended", None)
    assert worker_state(events[:1], running=False) == (WorkerState.EXITED, "idle when the run ended", None)
    assert worker_state([], running=False) == (WorkerState.EXITED, "booting when the run ended", None)
    ended = [*events, HookEvent(ts=5.0, hook_event_name="ProcessExit", status=0)]
    assert worker_state(ended, running=False) == (WorkerState.EXITED, "exit status 0", None), "how it ended itself"

"""orch.waits: inotify (inotify_simple) wakes a wait as soon as a file is written; every wait has a deadline
and a reason."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from orch.errors import WaitTimeoutError
from orch.waits import IN_CREATE, Inotify, read_line, wait_for_paths, wait_until, watch_file


def _later(action: Callable[[], object], delay_event: threading.Event) -> threading.Thread:
    def run() -> None:
        delay_event.wait(5)
        action()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_inotify_wakes_on_a_new_file_and_times_out_without_one(tmp_path: Path) -> None:
    with Inotify() as notifier:
        notifier.add_watch(tmp_path, IN_CREATE)
        assert notifier.wait(0) is False and notifier.wait(0.01) is False
        (tmp_path / "flag").touch()
        assert notifier.wait(5) is True
        assert notifier.wait(0) is False  # drained


def test_watching_a_missing_folder_is_an_oserror(tmp_path: Path) -> None:
    with Inotify() as notifier, pytest.raises(OSError):
        notifier.add_watch(tmp_path / "missing", IN_CREATE)


def test_wait_for_paths_returns_once_every_path_exists(tmp_path: Path) -> None:
    flags = [tmp_path / "a" / "done", tmp_path / "b" / "done"]
    for flag in flags:
        flag.parent.mkdir()
    go = threading.Event()

    def touch_all() -> None:
        for flag in flags:
            flag.touch()

    writer = _later(touch_all, go)
    go.set()
    assert wait_for_paths(flags, 10) == []
    writer.join()
    missing = tmp_path / "a" / "never"
    t0 = time.monotonic()
    assert wait_for_paths([missing], 0.2) == [missing]
    assert time.monotonic() - t0 < 5


def test_watch_file_yields_at_once_and_after_each_change(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_text("")
    seen = 0
    for _ in watch_file(log, timeout=10):
        seen += 1
        if seen == 3:
            break
        log.write_text(log.read_text() + "line\n")
    assert seen == 3


def test_wait_until_wakes_on_the_folder_and_names_its_reason(tmp_path: Path) -> None:
    target = tmp_path / "answer"
    go = threading.Event()
    writer = _later(lambda: target.write_text("42"), go)
    go.set()
    assert wait_until(lambda: target.exists() and target.read_text(), 10, "the answer", watch=tmp_path) == "42"
    writer.join()
    with pytest.raises(WaitTimeoutError, match="waiting for nothing at all"):
        wait_until(lambda: None, 0.1, "nothing at all", watch=tmp_path)


def test_read_line_takes_a_ready_line_and_tells_a_writer_gone_from_one_that_is_late() -> None:
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"rea")
        threading.Timer(0.05, os.write, (write_end, b"dy\nmore")).start()
        assert read_line(read_end, 10, "a ready line") == b"ready\nmore"  # a line may bring what follows it
        with pytest.raises(WaitTimeoutError, match="waiting for the word"):
            read_line(read_end, 0.05, "the word")  # nothing more and the writer still there
        os.write(write_end, b"half")
        os.close(write_end)
        write_end = -1
        assert read_line(read_end, 10, "a line") == b"half"  # the writer ended mid-line: what came
        assert read_line(read_end, 10, "a line") == b""  # and nothing after
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)

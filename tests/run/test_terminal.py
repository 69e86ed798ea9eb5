"""A worker's terminal log rendered through a terminal emulator (orch.run.terminal, orch.run.emulator), not
stripped of its escapes: a TUI that redraws in place reads as it did on screen (tests/scenarios/test_scripted_demo.py
checks a real pane's log against tmux's own capture of it)."""

from __future__ import annotations

import os
import random
import re
from collections.abc import Mapping

import pytest

from orch.errors import OrchError
from orch.run import emulator, terminal
from orch.run.emulator import render
from orch.run.folder import RunFolder
from orch.run.terminal import pane_sizes, record_pane_sizes, write_transcripts
from tests.helpers import run_info

pytestmark = pytest.mark.pure  # files and pyte: starts nothing

ESC = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]")

# What a spinner that redraws its line leaves in a log (the mangled lines of issue 32, stripped of escapes).
REDRAWN = (
    b"running PreToolUse hook\r\x1b[2K"  # a status line, erased and redrawn
    b"\x1b[1mWrote\x1b[22m 1 line to \x1b[36mnotes.md\x1b[39m\r\n"
    b"  agent-2\x1b[5D\x1b[Kent-2 ready\r\n"  # cursor back over its own text, erase to the end, write again
)


def test_a_redrawn_line_reads_as_the_terminal_showed_it() -> None:
    assert render(REDRAWN, (80, 10)) == ["Wrote 1 line to notes.md", "  agent-2 ready"]
    # What stripping the escapes gives instead: the mangled text the issue quotes.
    assert b"running PreToolUse hook\rWrote 1 line" in ESC.sub(b"", REDRAWN).replace(b"\x1b[2K", b"")


def test_the_pane_size_decides_where_lines_wrap_and_the_scrollback_comes_first() -> None:
    text = b"".join(f"line {i}\r\n".encode() for i in range(1, 8)) + b"x" * 25
    assert render(text, (10, 3)) == [*(f"line {i}" for i in range(1, 8)), "x" * 10, "x" * 10, "x" * 5]


def test_wide_characters_and_control_characters() -> None:
    # A wide character takes two cells (pyte's stub is skipped); what pyte keeps but no terminal shows (a
    # zero-width space, a bidi override a worker could use to reorder what a reader sees) is never in the text.
    assert render("日本 ok\u200b!\u202e?\x01 é\r\n".encode(), (20, 3)) == ["日本 ok!? é"]
    # pyte alone would stop drawing at the first of them: the rest of the text, which the pane showed, lost.
    assert "\n".join(render("shown\u200b hidden from pyte".encode(), (40, 2))) == "shown hidden from pyte"
    out = "\n".join(render(b"\x1b]0;title\x07\x1b[31mred\x1b[0m \x1b[?1049h\x1b[Hon top", (20, 3)))
    assert "\x1b" not in out and "on top" in out and "title" not in out


@pytest.mark.parametrize("prefix", ["", "?", ">", "=", " ", "?1;2;3"])
def test_no_control_sequence_ends_the_rendering(prefix: str) -> None:
    """pyte 0.8.2 raises on `CSI 1;2A` or `CSI ?1m`: a worker printing one would have kept its transcript out of
    the report. Every final character, with each prefix, now leaves the text after it drawn."""
    for code in range(0x40, 0x7F):
        out = "\n".join(render(f"a\x1b[{prefix}1;2{chr(code)}b and after".encode(), (80, 24)))
        assert "and after" in out, (prefix, chr(code), out)


def test_random_bytes_render_or_fail_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(32)
    for _ in range(200):
        render(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400))), (40, 10))
    run = RunFolder.for_name("broken")
    run.create(run_info("broken", workers=1))
    run.log(1).write_bytes(b"fine\r\n")

    def fails(data: bytes, size: tuple[int, int]) -> list[str]:
        raise IndexError("a screen past its end")

    monkeypatch.setattr(emulator, "render", fails)
    with pytest.raises(OrchError, match=r"worker 1's terminal log could not be rendered: IndexError: a screen past"):
        terminal.transcript(run, 1)
    write_transcripts(run, [1])  # the report still gets a transcript: what happened, and where the raw log is
    assert run.transcript(1).read_text().startswith("[orch: worker 1's terminal log could not be rendered")


def test_pane_sizes_are_recorded_and_a_missing_or_broken_record_is_none(tmp_path: object) -> None:
    run = RunFolder.for_name("sizes")
    run.create(run_info("sizes", workers=2))
    assert pane_sizes(run) == {}
    record_pane_sizes(run, {2: (119, 34), 1: (120, 34)})
    assert pane_sizes(run) == {1: (120, 34), 2: (119, 34)}
    run.pane_sizes.write_text('{"1": "wide"}')
    assert pane_sizes(run) == {}
    run.pane_sizes.write_text('{"1": [1000000000, 34], "2": [80, 0], "3": [80, 24]}')  # no pane is that large
    assert pane_sizes(run) == {3: (80, 24)}


def test_a_transcript_is_written_beside_its_log_and_only_again_when_the_log_moves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = RunFolder.for_name("logs")
    run.create(run_info("logs", workers=2))
    run.log(1).write_bytes(REDRAWN)
    os.utime(run.log(1), ns=(1, 1))  # written long before its transcript, whatever the clock's granularity
    write_transcripts(run, [1, 2])  # worker 2 left no log: no transcript, no error
    assert run.transcript(1).read_text() == "Wrote 1 line to notes.md\n  agent-2 ready\n"
    assert not run.transcript(2).exists()
    rendered: list[int] = []
    real = terminal.transcript

    def counted(folder: RunFolder, n: int, sizes: Mapping[int, tuple[int, int]] | None = None) -> list[str]:
        rendered.append(n)
        return real(folder, n, sizes)

    monkeypatch.setattr(terminal, "transcript", counted)
    write_transcripts(run, [1])
    assert rendered == []  # the log did not move since
    with run.log(1).open("ab") as fh:
        fh.write(b"more\r\n")
    os.utime(run.log(1), ns=(run.transcript(1).stat().st_mtime_ns,) * 2)  # a tie with the transcript: rendered
    write_transcripts(run, [1])
    assert rendered == [1] and run.transcript(1).read_text().endswith("ready\nmore\n")


def test_a_flooded_log_is_rendered_from_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    run = RunFolder.for_name("flood")
    run.create(run_info("flood", workers=1))
    monkeypatch.setattr(terminal, "RENDER_BYTES", 64)
    run.log(1).write_bytes(b"a" * 1000 + b"\r\nthe end\r\n")
    lines = terminal.transcript(run, 1)
    assert lines[0] == "[orch: the first 947 bytes of this terminal log are left out]" and lines[-1] == "the end"

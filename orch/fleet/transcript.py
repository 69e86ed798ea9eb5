"""A worker's terminal log (`logs/agent-N.log`: every byte its pane printed, cursor moves and redraws included)
rendered as the text a terminal would have shown, scrollback and all, through a terminal emulator (pyte):
what `orch read` prints once the run is stopped, and the readable transcript the report links.

Stripping the escapes instead mangles any TUI that redraws in place ("running PreTolUe hook"). The emulator
needs the pane's size: tmux tiles up to six panes a window, so orch.fleet.launch records each pane's size once
every pane exists (`RunFolder.pane_sizes`). The log is a worker's output: what comes out holds no control
character (pyte interprets them; anything left is dropped), and a log past `RENDER_BYTES` is rendered from its
last bytes only, so a worker that floods its terminal cannot make a report take minutes.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable, Mapping

import pyte
from pyte.screens import Char
from wcwidth import wcwidth

from orch.fleet.tmux import HISTORY_LIMIT, WINDOW_SIZE
from orch.run.files import atomic_write
from orch.run.folder import RunFolder

RENDER_BYTES = 1 << 20
"""The most of a log that is rendered: its last MiB (pyte takes about 10 s a MiB of a busy TUI's redraws)."""


def pane_sizes(run: RunFolder) -> dict[int, tuple[int, int]]:
    """Each worker's pane size (columns, lines) as recorded at launch; {} when none was (an older run)."""
    try:
        data = json.loads(run.pane_sizes.read_text())
        return {int(n): (int(size[0]), int(size[1])) for n, size in data.items()}
    except (OSError, ValueError, TypeError, IndexError, AttributeError):
        return {}


def record_pane_sizes(run: RunFolder, sizes: Mapping[int, tuple[int, int]]) -> None:
    atomic_write(run.pane_sizes, json.dumps({str(n): list(size) for n, size in sorted(sizes.items())}) + "\n")


def _line(cells: Mapping[int, Char], columns: int) -> str:
    """One screen line as text: a wide character's second cell (pyte's "" stub) skipped, what no terminal shows
    dropped from a cell (a zero-width format character, a bidi override: pyte keeps them with the character
    before), trailing blanks cut."""
    out = []
    wide = False
    for x in range(columns):
        if wide:
            wide = False
            continue
        char = cells[x].data
        wide = bool(char) and wcwidth(char[0]) == 2
        out.append("".join(c for c in char if c.isprintable()) or " ")
    return "".join(out).rstrip()


class _Screen(pyte.HistoryScreen):
    """pyte's screen, but for what it cannot draw: pyte stops drawing a run of text at the first character
    that takes no cell and combines with nothing (a zero-width space, a bidi override, a stray control), and
    drops the rest of the run, which a terminal shows. So a worker could hide text from its transcript that
    its pane showed: such characters are dropped, and the rest drawn."""

    def draw(self, data: str) -> None:
        super().draw("".join(c for c in data if wcwidth(c) > 0 or (wcwidth(c) == 0 and unicodedata.combining(c))))


def render(data: bytes, size: tuple[int, int] = WINDOW_SIZE) -> list[str]:
    """A terminal's output as the lines it left: the scrollback, then the screen (its trailing blank lines cut)."""
    columns, lines = size
    screen = _Screen(columns, lines, history=HISTORY_LIMIT)
    pyte.Stream(screen).feed(data.decode("utf-8", errors="replace"))
    shown = [_line(screen.buffer[y], columns) for y in range(lines)]
    while shown and not shown[-1]:
        shown.pop()
    return [_line(line, columns) for line in screen.history.top] + shown


def transcript(run: RunFolder, n: int, sizes: Mapping[int, tuple[int, int]] | None = None) -> list[str]:
    """Worker n's log rendered (FileNotFoundError when it left none); a log cut to its last RENDER_BYTES says so."""
    with run.log(n).open("rb") as fh:
        end = fh.seek(0, 2)
        fh.seek(max(0, end - RENDER_BYTES))
        data = fh.read()
    size = (sizes if sizes is not None else pane_sizes(run)).get(n, WINDOW_SIZE)
    head = [f"[orch: the first {end - len(data)} bytes of this terminal log are left out]"] if end > len(data) else []
    return head + render(data, size)


def write_transcripts(run: RunFolder, workers: Iterable[int]) -> None:
    """Each worker's readable transcript beside its log (`RunFolder.transcript`), rendered again only when the log
    is newer than it: the report links these."""
    sizes = pane_sizes(run)
    for n in workers:
        log, out = run.log(n), run.transcript(n)
        try:
            if out.exists() and out.stat().st_mtime_ns >= log.stat().st_mtime_ns:
                continue
            text = "\n".join(transcript(run, n, sizes))
        except FileNotFoundError:
            continue
        atomic_write(out, text + "\n")

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

import inspect
import json
import unicodedata
from collections.abc import Callable, Iterable, Mapping

import pyte
from pyte.screens import Char
from wcwidth import wcwidth

from orch.errors import OrchError, one_line
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
    """pyte's screen, made to read what a terminal reads (pyte 0.8.2 does not, and a worker controls the input):
    - pyte stops drawing a run of text at the first character that takes no cell and combines with nothing (a
      zero-width space, a bidi override, a stray control) and drops the rest, which a terminal shows: such
      characters are dropped, and the rest drawn, so no text of the pane is hidden from its transcript;
    - pyte raises on a control sequence with more parameters than its handler takes (`CSI 1;2A`) or a private
      variant it has no meaning for (`CSI ?1m`), which would end the rendering: each handler takes the
      parameters it knows and ignores the rest, as a terminal does (`_tolerant`)."""

    def draw(self, data: str) -> None:
        super().draw("".join(c for c in data if wcwidth(c) > 0 or (wcwidth(c) == 0 and unicodedata.combining(c))))


def _tolerant(name: str) -> Callable[..., None]:
    """pyte's handler of a control sequence, called with no more parameters than it takes, and a private
    variant (`private=True`) ignored unless the handler has a meaning for it."""
    base = getattr(pyte.HistoryScreen, name)
    params = [p for p in inspect.signature(base).parameters.values() if p.name != "self"]
    private = any(p.name == "private" or p.kind is p.VAR_KEYWORD for p in params)
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        takes: int | None = None
    else:
        takes = sum(1 for p in params if p.kind is p.POSITIONAL_OR_KEYWORD and p.name != "private")

    def handler(self: _Screen, *args: int, **kwargs: bool) -> None:
        if kwargs.get("private") and not private:
            return
        base(self, *(args if takes is None else args[:takes]), **(kwargs if private else {}))

    return handler


for _event in set(pyte.Stream.csi.values()):
    setattr(_Screen, _event, _tolerant(_event))


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
    try:
        return head + render(data, size)
    except Exception as exc:  # pyte on a worker's bytes: whatever it still cannot read ends here, in one line
        raise OrchError(
            f"worker {n}'s terminal log could not be rendered: {one_line(exc)}", hint=f"its raw log: {run.log(n)}"
        ) from None


def write_transcripts(run: RunFolder, workers: Iterable[int]) -> None:
    """Each worker's readable transcript beside its log (`RunFolder.transcript`), rendered again only when the log
    is newer than it: the report links these."""
    sizes = pane_sizes(run)
    for n in workers:
        log, out = run.log(n), run.transcript(n)
        try:
            if out.exists() and out.stat().st_mtime_ns > log.stat().st_mtime_ns:  # a tie may hide a late write
                continue
            text = "\n".join(transcript(run, n, sizes))
        except FileNotFoundError:
            continue
        except OrchError as exc:
            text = f"[orch: {exc.message}; the raw log is {log.name}, beside this file]"
        atomic_write(out, text + "\n")

"""The terminal emulator a worker's log is rendered with (orch.run.terminal): pyte, made to read what a terminal
reads, for the input is a worker's and pyte 0.8.2 does not. Imported only where a log is rendered."""

from __future__ import annotations

import inspect
import unicodedata
from collections.abc import Callable, Mapping

import pyte
from pyte.screens import Char
from wcwidth import wcwidth

from orch.run.terminal import HISTORY_LIMIT, WINDOW_SIZE


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
    """pyte's screen, reading as a terminal does:
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

"""A worker's terminal: the window and scrollback tmux gives its pane (orch.fleet.tmux sets them), the size
its pane had, and its log (`logs/agent-N.log`: every byte its pane printed, cursor moves and redraws included)
rendered as the text the terminal showed, scrollback and all, through a terminal emulator (pyte): what `orch
read` prints once the run is stopped, and the readable transcript the report links.

Stripping the escapes instead mangles any TUI that redraws in place ("running PreTolUe hook"). The emulator
needs the pane's size: tmux tiles up to six panes a window, so orch.fleet.launch records each pane's size once
every pane exists (`RunFolder.pane_sizes`). The log is a worker's output: what comes out holds no control
character (pyte interprets them; anything left is dropped), and a log past `RENDER_BYTES` is rendered from its
last bytes only, so a worker that floods its terminal cannot make a report take minutes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from orch.errors import OrchError, one_line
from orch.run.files import atomic_write
from orch.run.folder import RunFolder

WINDOW_SIZE = (240, 70)
"""Each tmux window's size: large, so six tiled TUIs still get about 80x23 each (and a log with no recorded
pane size is rendered at it)."""
HISTORY_LIMIT = 50_000
"""The scrollback lines a pane keeps (tmux's history-limit), and a rendered log."""
RENDER_BYTES = 1 << 20
"""The most of a log that is rendered: its last MiB (pyte takes about 10 s a MiB of a busy TUI's redraws)."""


def pane_sizes(run: RunFolder) -> dict[int, tuple[int, int]]:
    """Each worker's pane size (columns, lines) as recorded at launch; {} when none was (an older run). A size no
    pane of a window can have is left out (a shared run's worker could write the file: rendering at a billion
    columns would never end)."""
    try:
        data = json.loads(run.pane_sizes.read_text())
        sizes = {int(n): (int(size[0]), int(size[1])) for n, size in data.items()}
    except (OSError, ValueError, TypeError, IndexError, AttributeError):
        return {}
    return {n: (w, h) for n, (w, h) in sizes.items() if 0 < w <= WINDOW_SIZE[0] and 0 < h <= WINDOW_SIZE[1]}


def record_pane_sizes(run: RunFolder, sizes: Mapping[int, tuple[int, int]]) -> None:
    atomic_write(run.pane_sizes, json.dumps({str(n): list(size) for n, size in sorted(sizes.items())}) + "\n")


def transcript(run: RunFolder, n: int, sizes: Mapping[int, tuple[int, int]] | None = None) -> list[str]:
    """Worker n's log rendered (FileNotFoundError when it left none); a log cut to its last RENDER_BYTES says so."""
    with run.log(n).open("rb") as fh:
        end = fh.seek(0, 2)
        fh.seek(max(0, end - RENDER_BYTES))
        data = fh.read()
    size = (sizes if sizes is not None else pane_sizes(run)).get(n, WINDOW_SIZE)
    head = [f"[orch: the first {end - len(data)} bytes of this terminal log are left out]"] if end > len(data) else []
    from orch.run.emulator import render  # pyte: loaded only by what renders (tmux's users import this module)

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

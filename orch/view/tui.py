"""`orch watch NAME` on a terminal: a Textual app over the run's Watcher.

A thread waits on the run folder (inotify, a one-second backstop), makes a snapshot and hands it to the
app; the app only draws. Keys act through orch.view.actions (the CLI's own commands, logged as events).
Quitting leaves the fleet running.
"""

from __future__ import annotations

import subprocess
import threading
import time
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Label, OptionList, Static
from textual.worker import get_current_worker

from orch import escape
from orch.backends.registry import sandbox_for
from orch.errors import NotFoundError, OrchError
from orch.notify.notice import Notice
from orch.run.folder import RunFolder, list_runs
from orch.view import plain
from orch.view.actions import Action, Outcome, orch_argv, perform
from orch.view.snapshot import Snapshot, Watcher
from orch.view.wake import Wakeup
from orch.view.widgets import MINI_LINES, TILE_WIDTH, VERDICT_COLOURS, AskScreen, NeedsList, PaneScreen, Tile, ring

MINI_REFRESH = 2.0  # seconds between captures of the visible panes
FRAMES = 10  # snapshots drawn per second at most
BACKSTOP = 5.0  # seconds between snapshots when the folder is quiet (what is shown moves by the minute)


class RunPicker(Screen[None]):
    """Every run (the `orch ls` view); Enter watches one."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("q", "app.quit", "quit")]

    def compose(self) -> ComposeResult:
        yield Label("orch watch: pick a run (Enter), q quits", id="picker-title")
        yield DataTable(id="runs", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#runs", DataTable)
        table.add_columns("NAME", "BACKEND", "AGENT", "WORKERS", "STATUS")
        for run in list_runs():
            try:
                info = run.info()
            except OrchError:
                continue
            table.add_row(info.name, info.backend, info.mix(), str(info.workers), info.status.value, key=info.name)
        if not table.row_count:
            self.query_one("#picker-title", Label).update("no runs: start one with `orch up` or `orch run`; q quits")

    @on(DataTable.RowSelected)
    def picked(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value:
            app = self.app
            assert isinstance(app, WatchApp)
            app.watch_run(RunFolder.for_name(event.row_key.value))


class FleetScreen(Screen[None]):
    """The live view of one run."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left,h", "move(-1)", "prev", show=False),
        Binding("right,l", "move(1)", "next", show=False),
        Binding("enter,o", "open", "screen"),
        Binding("j", "jump", "needs you"),
        Binding("s", "send", "send"),
        Binding("n", "nudge", "nudge"),
        Binding("r", "restart", "restart"),
        Binding("a", "attach", "attach"),
        Binding("K", "kill", "kill run"),
        Binding("slash", "filter", "filter bus"),
        Binding("m", "miniatures", "panes"),
        Binding("q", "app.quit", "quit"),
    ]
    DEFAULT_CSS = """
    #progress { height: auto; padding: 0 1; background: $boost; }
    #tiles { height: 1fr; }
    #grid { grid-size: 3; grid-gutter: 0 1; height: auto; }
    #side { width: 1fr; min-width: 30; }
    #main-tiles { width: 2fr; }
    #matrix, #changes, #commentary, #bus { border: round $primary-darken-2; height: 1fr; }
    #matrix, #changes { height: auto; max-height: 12; }
    #filter { height: 3; }
    """

    def __init__(self, run: RunFolder) -> None:
        super().__init__()
        self.run = run
        self.watcher = Watcher(run)  # NotFoundError for an unknown run, before the screen shows
        self.selected = 1
        self.snap: Snapshot | None = None
        self.tiles: dict[int, Tile] = {}
        self.notice = ""
        self.bus_filter = ""
        self.bus_shown: list[str] = []
        self._shown: dict[str, tuple[str, tuple[str, ...]]] = {}
        self._key: object = None
        self.miniatures = False
        self._mini_stop = threading.Event()
        self._wake = Wakeup(run)
        self._opened = time.time()
        self._seen_needs: set[str] = set()
        self.rang: list[Notice] = []
        """The needs rung for: each new one while watched rings once, unless the run is muted."""

    def compose(self) -> ComposeResult:
        yield Static(id="progress")
        with Horizontal():
            with VerticalScroll(id="main-tiles"):
                yield Grid(*[Tile(n) for n in range(1, self.watcher.info.workers + 1)], id="grid")
            with Vertical(id="side"):
                yield NeedsList()
                yield Static(id="matrix")
                yield Static(id="changes")
                yield Static(id="commentary")
                yield Static(id="bus")
                yield Input(placeholder="filter the bus (/)", id="filter")
        yield Footer()

    def on_mount(self) -> None:
        self.tiles = {t.n: t for t in self.query(Tile)}
        self.query_one("#matrix").border_title = "verification"
        self.query_one("#changes").border_title = "changes"
        self.query_one("#commentary").border_title = "commentary"
        self.query_one("#bus").border_title = "bus"
        self._layout(self.size.width)
        self.show(self.watcher.snapshot())
        self.follow()

    def on_unmount(self) -> None:
        self._wake.stop()
        self._mini_stop.set()

    def action_miniatures(self) -> None:
        """Toggle a live miniature of each visible worker's pane (a local run's tmux server only). Nothing here
        asks tmux: a slow or hung server (each call is bounded at a minute) would freeze the whole view; the
        captures' thread finds out whether this run shows panes at all (`_no_miniatures`)."""
        self.miniatures = not self.miniatures
        if not self.miniatures:
            for tile in self.tiles.values():
                tile.show_mini("")
        if self.miniatures:
            self._mini_stop.clear()
            self.capture_panes()
        else:
            self._mini_stop.set()

    def _visible(self) -> list[int]:
        area = self.query_one("#main-tiles").region
        return [n for n, tile in self.tiles.items() if tile.region.overlaps(area)]

    @work(thread=True, exclusive=True, group="miniatures")
    def capture_panes(self) -> None:
        """Every MINI_REFRESH seconds, the last lines of the visible tiles' panes (one capture-pane each)."""
        info = self.watcher.info
        sandbox = sandbox_for(info)
        width = TILE_WIDTH - 4
        worker = get_current_worker()
        while not self._mini_stop.is_set() and not worker.is_cancelled:
            screens = sandbox.screens(info, self.app.call_from_thread(self._visible), MINI_LINES)
            if screens is None:  # not a run whose panes this machine can read
                self.app.call_from_thread(self._no_miniatures)
                return
            for n, screen in screens.items():
                lines = [plain.cut(escape.terminal(line, 200), width) for line in screen.splitlines()[-MINI_LINES:]]
                self.app.call_from_thread(self._show_mini, n, "\n".join(lines))
            self._mini_stop.wait(MINI_REFRESH)

    def _no_miniatures(self) -> None:
        if self.miniatures:
            self.miniatures = False
            self._mini_stop.set()
            self.app.notify("pane miniatures need a local run: Enter shows a worker's full screen", severity="warning")

    def _show_mini(self, n: int, screen: str) -> None:
        """A capture, drawn on the app's thread, where the toggle runs: unless the miniatures were turned off
        while it was taken (a slow capture under load), when it would stay on the tile, nothing clearing it."""
        if self.miniatures:
            self.tiles[n].show_mini(screen)

    def on_resize(self, event: object) -> None:
        self._layout(self.size.width)

    def _layout(self, width: int) -> None:
        narrow = width < 90
        self.query_one("#side").display = not narrow
        usable = width if narrow else width * 2 // 3
        self.query_one("#grid", Grid).styles.grid_size_columns = max(1, usable // TILE_WIDTH)

    @work(thread=True, exclusive=True)
    def follow(self) -> None:
        """Waits on the folder, snapshots, hands it to the app; stops when the screen goes or the run does."""
        try:
            while not self._wake.stopped:
                try:
                    snap = self.watcher.snapshot()
                except NotFoundError:
                    self.app.call_from_thread(self.gone)
                    return
                self.app.call_from_thread(self.show, snap)
                drawn = time.monotonic()
                self._wake.wait(BACKSTOP)
                # A busy fleet changes its folder many times a second: draw at most FRAMES times a second.
                self._wake.pause(drawn + 1 / FRAMES - time.monotonic())
        finally:
            self._wake.close()

    def gone(self) -> None:
        self.notice = f"the run folder {self.run.root} vanished: showing the last that was seen (q quits)"
        if self.snap is not None:
            self.show(self.snap.model_copy(update={"gone": True}))

    def _put(self, widget_id: str, text: Text) -> None:
        """Update a panel only when what it shows changed (a redraw is the view's main cost)."""
        key = (text.plain, tuple(str(span) for span in text.spans))
        old = self._shown.get(widget_id)
        if old != key:
            self._shown[widget_id] = key
            # Only a panel sized by its text (progress, matrix) needs a new layout, and only when its height moved.
            sized = widget_id in ("progress", "matrix", "changes")
            lines = text.plain.count("\n")
            relayout = sized and (old is None or old[0].count("\n") != lines)
            self.query_one(f"#{widget_id}", Static).update(text, layout=relayout)

    def show(self, snap: Snapshot) -> None:
        now = time.time()
        # Nothing shown changed (a tool call like the last, the backstop's tick): nothing to do. Times are
        # shown to the minute, so a new minute counts as a change.
        self._ring(snap)
        key = (snap.workers, snap.matrix, snap.changes, snap.progress, snap.commentary[-1:], snap.bus[-1:],
               len(snap.bus), snap.status, snap.gone, snap.needs, self.notice, int(now // 60))  # fmt: skip
        if key == self._key:
            self.snap = snap
            return
        self._key = key
        self.snap = snap
        head = plain.progress_line(snap, precise=False)
        if self.notice:
            head += "\n" + self.notice
        self._put("progress", Text(head))
        for w in snap.workers:
            tile = self.tiles.get(w.n)
            if tile is not None:
                tile.show(w, now)
                tile.select(w.n == self.selected)
        matrix = Text(no_wrap=True, overflow="ellipsis")
        for row in snap.matrix:
            matrix.append(f"{row.finding} W{row.finder} ")
            matrix.append(row.status, style=VERDICT_COLOURS.get(row.status, ""))
            for cell in row.cells:
                matrix.append(f" W{cell.verifier}:")
                matrix.append(cell.verdict[:4], style=VERDICT_COLOURS.get(cell.verdict, ""))
            matrix.append("\n")
        self._put("matrix", matrix if snap.matrix else Text("no findings yet", style="dim"))
        self._put("changes", Text("\n".join(snap.changes)) if snap.changes else Text("no changes", style="dim"))
        self.query_one(NeedsList).show(snap.needs)
        self._put("commentary", Text("\n".join(c.text for c in snap.commentary[-30:])))
        self._show_bus()

    def _ring(self, snap: Snapshot) -> None:
        for need in snap.needs:
            if need.key in self._seen_needs:
                continue
            self._seen_needs.add(need.key)
            if need.ts >= self._opened and not snap.muted:
                ring(self.app, need)
                self.rang.append(need)

    def action_jump(self) -> None:
        """The newest need that is a worker's: its screen."""
        needs = self.snap.needs if self.snap is not None else []
        worker = next((need.worker for need in needs if need.worker is not None), None)
        if worker is None:
            self.app.notify("nothing needs you", markup=False)
            return
        self.app.push_screen(PaneScreen(self.run, worker))

    @on(OptionList.OptionSelected, "#needs")
    def need_picked(self, event: OptionList.OptionSelected) -> None:
        need = self.query_one(NeedsList).needs[event.option_index]
        if need.worker is not None:
            self.app.push_screen(PaneScreen(self.run, need.worker))
        else:
            self.app.notify(need.action, title=need.title(), markup=False)

    def _show_bus(self) -> None:
        if self.snap is None:
            return
        needle = self.bus_filter.lower()
        shown = [b for b in self.snap.bus if needle in f"[{b.sender}] {b.text}".lower()]
        self.bus_shown = [f"{plain.clock(b.ts)} [{b.sender}] {b.text}" for b in shown[-30:]]
        self._put("bus", Text("\n".join(self.bus_shown)))

    @on(Input.Changed, "#filter")
    def filtered(self, event: Input.Changed) -> None:
        self.bus_filter = event.value
        self._show_bus()

    def action_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def action_move(self, step: int) -> None:
        total = len(self.tiles)
        self.selected = (self.selected - 1 + step) % total + 1
        for n, tile in self.tiles.items():
            tile.select(n == self.selected)
        self.tiles[self.selected].scroll_visible()

    def action_open(self) -> None:
        self.app.push_screen(PaneScreen(self.run, self.selected))

    def action_send(self) -> None:
        n = self.selected

        def sent(text: str | None) -> None:
            if text:
                self.act(Action.SEND, n, text)

        self.app.push_screen(AskScreen(f"message to worker {n} (one submission, acknowledged):"), sent)

    def action_nudge(self) -> None:
        self.act(Action.NUDGE, self.selected)

    def action_restart(self) -> None:
        n = self.selected

        def confirmed(yes: str | None) -> None:
            if yes:
                self.act(Action.RESTART, n)

        self.app.push_screen(AskScreen(f"restart worker {n}?", confirm=True), confirmed)

    def action_kill(self) -> None:
        def confirmed(yes: str | None) -> None:
            if yes:
                self.act(Action.KILL, None)

        self.app.push_screen(AskScreen(f"kill run {self.run.name}? (its folder stays)", confirm=True), confirmed)

    def action_attach(self) -> None:
        """Attach with write, in this terminal; back to the view when detached."""
        with self.app.suspend():
            subprocess.run(orch_argv("attach", self.run.name, "--write"), check=False)

    @work(thread=True)
    def act(self, action: Action, worker: int | None, text: str = "") -> Outcome | None:
        self.app.call_from_thread(self.app.notify, f"{action.value}{f' W{worker}' if worker else ''}: working...")
        try:
            outcome = perform(self.run, action, worker, text, by="tui")
        except OrchError as exc:
            self.app.call_from_thread(self.app.notify, exc.one_line(), severity="error")
            return None
        severity = "information" if outcome.ok else "error"
        self.app.call_from_thread(self.app.notify, f"{action.value}: {outcome.said}", severity=severity)
        return outcome


class WatchApp(App[int]):
    TITLE = "orch watch"

    def __init__(self, run: RunFolder | None) -> None:
        super().__init__()
        self.first = run

    def on_mount(self) -> None:
        if self.first is None:
            self.push_screen(RunPicker())
        else:
            self.push_screen(FleetScreen(self.first))

    def watch_run(self, run: RunFolder) -> None:
        try:
            self.push_screen(FleetScreen(run))
        except NotFoundError as exc:
            self.notify(exc.one_line(), severity="error")


def run_tui(run: RunFolder | None) -> int:
    """Run the app in this terminal; its exit code (0). The fleet keeps running."""
    if run is not None:
        Watcher(run)  # an unknown run is one line and exit 2, before the screen is taken
    return WatchApp(run).run() or 0

"""The TUI's parts below its fleet screen (orch.view.tui): a worker's tile with its pane miniature, the list
of what needs a person, a worker's full screen (read-only, through `orch read`), and the one-line question box."""

from __future__ import annotations

import os
import subprocess
import threading
from typing import ClassVar

from rich.text import Text
from textual import events, on, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Input, Label, OptionList, Static

from orch.notify import bodies
from orch.notify.notice import WORDS, Notice
from orch.run.folder import RunFolder
from orch.run.records import WorkerState
from orch.view import plain
from orch.view.actions import orch_argv
from orch.view.snapshot import WorkerTile

TILE_WIDTH = 36
MINI_LINES = 3  # lines of a pane's miniature
SCREEN_REFRESH = 1.0  # seconds between captures of a worker's full screen

COLOURS: dict[WorkerState, str] = {  # hex: both Rich and Textual CSS read it
    WorkerState.BOOTING: "#1e90ff",
    WorkerState.IDLE: "#d7af00",
    WorkerState.BUSY: "#00af00",
    WorkerState.WAITING_FOR_PERMISSION: "#d700d7",
    WorkerState.RATE_LIMITED: "#ff8700",
    WorkerState.ERROR: "#d70000",
    WorkerState.CRASHED: "#d70000",
    WorkerState.EXITED: "#808080",
}
VERDICT_COLOURS = {"CONFIRMED": "green", "REFUTED": "red", "UNVERIFIABLE": "yellow", "PENDING": "grey50"}


def tile_text(w: WorkerTile, now: float, width: int = TILE_WIDTH - 4) -> Text:
    """A worker's tile: who, state (coloured) and for how long, job, cost, last bus line."""
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"W{w.n} ", style="bold")
    text.append(plain.cut(w.model or w.agent, width - 4) + "\n")
    since = f" {plain.coarse(now - w.since)}" if w.since is not None else ""
    state = w.state.value + (f" ({w.detail})" if w.detail else "")
    text.append(plain.cut(state, width - len(since)), style=f"bold {COLOURS[w.state]}")
    text.append(since + "\n")
    job = f"{w.job} ({w.role})" if w.job else ("out: " + w.out if w.out else "no job")
    text.append(plain.cut(job, width) + "\n")
    text.append(plain.money(w.cost_usd) + ("  done" if w.done else "") + "\n")
    bus_line = w.last_bus.split("] ", 1)[-1] if w.last_bus else "-"
    text.append(plain.cut(bus_line, width), style="italic")
    return text


class Tile(Static):
    """One worker. `plain` is its text without styles (what the tests read)."""

    DEFAULT_CSS = """
    Tile { height: auto; border: round $secondary; padding: 0 1; }
    """

    def __init__(self, n: int) -> None:
        super().__init__(id=f"w{n}")
        self.n = n
        self.plain = ""
        self.state: WorkerState | None = None
        self.mini = ""
        """The last lines of its pane (the miniature, `m`), as shown."""
        self._text = Text()
        self._lines = 0

    def show(self, w: WorkerTile, now: float) -> None:
        text = tile_text(w, now)
        if text.plain == self.plain and w.state is self.state:
            return  # nothing to draw: most tiles, most of the time
        moved = w.state is not self.state
        self.plain, self.state, self._text = text.plain, w.state, text
        if moved:  # a style change lays the screen out again: only when the state moved
            self._border()
        self._draw()

    def show_mini(self, screen: str) -> None:
        """The pane's last lines under the tile's text ("" hides them)."""
        if screen != self.mini:
            self.mini = screen
            self._draw()

    def _draw(self) -> None:
        text = self._text.copy()
        if self.mini:
            text.append("\n" + self.mini, style="dim")
        lines = text.plain.count("\n") + 1
        # A tile is as tall as its text: lay the grid out again only when that changed (a miniature came or went).
        self.update(text, layout=lines != self._lines)
        self._lines = lines

    def select(self, selected: bool) -> None:
        if selected != self.has_class("selected"):
            self.set_class(selected, "selected")
            self._border()

    def _border(self) -> None:
        """Coloured by state; heavy when selected (the keys act on it)."""
        colour = COLOURS[self.state] if self.state is not None else "#808080"
        self.styles.border = ("heavy" if self.has_class("selected") else "round", colour)


class NeedsList(OptionList):
    """What needs a person, newest first: Enter (or a click) opens that worker's screen. Hidden when empty."""

    DEFAULT_CSS = """
    NeedsList { height: auto; max-height: 8; border: round #d700d7; }
    """

    def __init__(self) -> None:
        super().__init__(id="needs")
        self.needs: list[Notice] = []
        self.border_title = "needs you"
        self.display = False

    def show(self, needs: list[Notice]) -> None:
        if needs == self.needs:
            return
        self.needs = needs
        self.display = bool(needs)
        self.set_options(need_text(n) for n in needs)


def need_text(need: Notice) -> Text:
    """One line of the list (a Text: nothing a worker wrote is read as markup)."""
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"{plain.clock(need.ts)} ")
    text.append(f"W{need.worker} " if need.worker is not None else "", style="bold")
    text.append(WORDS[need.reason], style="bold #d700d7")
    text.append(f": {need.text}" if need.text else "")
    return text


def ring(app: App[int], need: Notice) -> None:
    """A new need while watched: a toast, the bell and the terminal's own notification (OSC 9/777), written
    through Textual's driver between its frames (`App.bell` writes its bell the same way)."""
    app.notify(f"{need.title()}\n{need.text}\n{need.action}", title="needs you", severity="warning", markup=False)
    # Private, knowingly: Textual 8 has no public call that writes a sequence (its own `bell` and
    # `copy_to_clipboard` write through `_driver` too), and a write to the terminal any other way can land in the
    # middle of one of its frames and split its escape sequences. tests/view/test_tui.py checks the attribute.
    driver = app._driver
    if driver is not None and not app.is_headless:
        driver.write(bodies.terminal(need, tmux=bool(os.environ.get("TMUX"))))


class PaneScreen(Screen[None]):
    """A worker's full screen, read-only (`orch read`), refreshed every second; Escape goes back."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q", "app.pop_screen", "back")]

    def __init__(self, run: RunFolder, n: int) -> None:
        super().__init__()
        self.run, self.n = run, n
        self._stop = threading.Event()

    def compose(self) -> ComposeResult:
        yield Label(f"worker {self.n} of {self.run.name}: read-only (Esc: back)", id="pane-title")
        with VerticalScroll():
            yield Static(id="pane")
        yield Footer()

    def on_mount(self) -> None:
        self.capture()

    def on_unmount(self) -> None:
        self._stop.set()

    @work(thread=True, exclusive=True)
    def capture(self) -> None:
        while not self._stop.is_set():
            proc = subprocess.run(
                orch_argv("read", self.run.name, str(self.n), "--lines", "200"),
                capture_output=True, text=True, check=False, timeout=30,
            )  # fmt: skip
            screen = proc.stdout if proc.returncode == 0 else proc.stderr
            self.app.call_from_thread(self._show, screen)
            self._stop.wait(SCREEN_REFRESH)

    def _show(self, screen: str) -> None:
        self.query_one("#pane", Static).update(Text(screen))


class AskScreen(ModalScreen[str | None]):
    """One line of input (a message to send), or a yes/no confirmation when `confirm`."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]
    DEFAULT_CSS = """
    AskScreen { align: center middle; }
    AskScreen > Vertical { width: 80%; max-width: 100; height: auto; border: thick $accent; padding: 1 2;
                           background: $panel; }
    """

    def __init__(self, prompt: str, confirm: bool = False) -> None:
        super().__init__()
        self.prompt, self.confirm = prompt, confirm

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.prompt + (" [y/N]" if self.confirm else ""))
            if not self.confirm:
                yield Input(id="ask")

    def on_key(self, event: events.Key) -> None:
        if self.confirm:  # any key answers; only y says yes. The key goes no further (not to the fleet's keys).
            event.stop()
            event.prevent_default()
            self.dismiss("y" if event.key == "y" else None)

    @on(Input.Submitted, "#ask")
    def submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value if event.value.strip() else None)

    def action_cancel(self) -> None:
        self.dismiss(None)

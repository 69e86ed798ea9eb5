"""Progress for long waits: a one-line status bar on a terminal's stderr, plain lines anywhere else.

`orch run` keeps a bar under its commentary (jobs, findings, cost, time left, workers by state); `orch up`
shows each worker booting. Both read the run folder as the view does (orch.view.snapshot), so they work
the same for a local run and a container run; a run folder on a remote engine is not here to read.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from orch.errors import OrchError
from orch.run.folder import RunFolder
from orch.view import plain
from orch.view.wake import Wakeup

if TYPE_CHECKING:
    from orch.view.snapshot import Snapshot

CLEAR = "\r\x1b[K"
BOOT_TIMEOUT = 3600.0  # seconds a boot watcher waits for the run folder before it gives up quietly


class StatusBar:
    """The last line of a terminal, redrawn in place; `echo` prints a line above it."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.text = ""
        self._lock = threading.Lock()

    def _width(self) -> int:
        return max(20, shutil.get_terminal_size((100, 20)).columns - 1)

    def set(self, text: str) -> None:
        with self._lock:
            self.text = plain.cut(text, self._width())
            self.stream.write(CLEAR + self.text)
            self.stream.flush()

    def echo(self, line: str) -> None:
        with self._lock:
            self.stream.write(CLEAR + line + "\n" + self.text)
            self.stream.flush()

    def raw(self, sequence: str) -> None:
        """Write a sequence that moves no cursor (a bell, a terminal's OSC notification) between redraws."""
        with self._lock:
            self.stream.write(sequence)
            self.stream.flush()

    def clear(self) -> None:
        with self._lock:
            self.text = ""
            self.stream.write(CLEAR)
            self.stream.flush()


def run_status(snap: Snapshot) -> str:
    """`orch run`'s bar: jobs, findings, cost against the budget, time left, workers by state."""
    p = snap.progress
    states = Counter(w.state for w in snap.workers)
    workers = " ".join(f"{count} {state.value}" for state, count in sorted(states.items(), key=lambda i: -i[1]))
    parts = [
        f"jobs {p.jobs_done}/{p.jobs_total}",
        f"findings {p.findings} ({p.confirmed} confirmed, {p.refuted} refuted)",
    ]
    budget = f" of ${p.budget_usd:.2f}" if p.budget_usd is not None else ""
    parts.append(f"{plain.money(p.cost_usd)}{budget}{plain.billing(p.unbilled)}")
    if p.deadline is not None and p.outcome is None:
        parts.append(f"{plain.span(p.deadline - snap.taken)} left")
    parts.append(workers)
    return " | ".join(parts)


class Follower:
    """A thread that redraws something from the run folder whenever it changes (and once a second)."""

    def __init__(self, run: RunFolder, step: Callable[[], bool]) -> None:
        self._run, self._step = run, step
        self._stop = threading.Event()
        self._wake: Wakeup | None = None
        self._thread = threading.Thread(target=self._loop, name="orch-progress", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        deadline = time.monotonic() + BOOT_TIMEOUT
        while not self._run.run_json.is_file():  # `orch up` has not made it yet
            if self._stop.wait(0.1) or time.monotonic() > deadline:
                return
        wake = self._wake = Wakeup(self._run)
        try:
            while not self._stop.is_set():
                try:
                    if self._step():
                        return
                except OrchError:
                    return  # the folder went away (a failed up removes it): nothing more to show
                wake.wait()
        finally:
            wake.close()

    def close(self, last: bool = False) -> None:
        """Stop; waits for the thread (within the wake-up backstop) so nothing is drawn after. `last`: take one
        more step first, here, so what happened just before the close is shown."""
        self._stop.set()
        if (wake := self._wake) is not None:
            wake.stop()  # a wait under way (up to the backstop's second) ends now: a refused `orch up` says so at once
        self._thread.join(timeout=2.0)
        if last and not self._thread.is_alive() and self._run.run_json.is_file():
            with contextlib.suppress(OrchError):
                self._step()


class RunBar:
    """`orch run` on a terminal: commentary lines above, the run's status bar below."""

    def __init__(self, run: RunFolder, stream: TextIO) -> None:
        # Here, not at the top: the run folder's reader pulls in the controller, the report and the notifier
        # (0.2 s of CPU), which `orch up`'s boot bar and `orch setup`'s never use.
        from orch.view.snapshot import Watcher

        self.bar = StatusBar(stream)
        self.watcher = Watcher(run)
        self._follower = Follower(run, self._step)

    def _step(self) -> bool:
        self.bar.set(run_status(self.watcher.snapshot()))
        return False

    def echo(self, line: str) -> None:
        self.bar.echo(line)

    def close(self) -> None:
        self._follower.close()
        self.bar.clear()


class BootProgress:
    """`orch up`: each worker as it boots (its first hook event), as a bar on a terminal or a line each."""

    def __init__(self, run: RunFolder, workers: int, stream: TextIO, tty: bool) -> None:
        self.run, self.workers, self.tty = run, workers, tty
        self.stream = stream
        self.bar = StatusBar(stream) if tty else None
        self.started = time.time()
        self.booted: dict[int, float] = {}
        self._follower = Follower(run, self._step)

    def _say(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()

    def _step(self) -> bool:
        info = self.run.info()
        if info.created.timestamp() < self.started - 2:  # the run this `up --replace`s: not ours yet
            return False
        for n in range(1, self.workers + 1):
            if n in self.booted:
                continue
            events = self.run.hook_events(n)
            if events and events[-1].ts >= self.started - 2:
                self.booted[n] = time.time() - self.started
                if self.bar is None:
                    self._say(f"worker {n} booted ({self.booted[n]:.1f}s)")
        if self.bar is not None:
            waiting = [n for n in range(1, self.workers + 1) if n not in self.booted]
            where = f"; waiting for {plain.cut(' '.join(f'W{n}' for n in waiting), 60)}" if waiting else ""
            self.bar.set(f"booting: {len(self.booted)}/{self.workers} workers up{where}")
        return len(self.booted) == self.workers

    def close(self) -> None:
        self._follower.close(last=True)
        if self.bar is not None:
            self.bar.clear()


class BuildProgress:
    """`orch image build` on a terminal: each build step stays as a line, the step's own output scrolls by in
    the bar (an npm install prints hundreds of lines); the engine's errors stay too."""

    def __init__(self, stream: TextIO) -> None:
        self.bar = StatusBar(stream)

    def line(self, text: str) -> None:
        if text.startswith(("Step ", "ERROR", "Successfully")):
            self.bar.echo(text)
        else:
            self.bar.set("  " + text)

    def close(self) -> None:
        self.bar.clear()


def bar(done: float, total: float, width: int = 24) -> str:
    """`[#########...............]`: `done` of `total`, never full before the end (the size is an estimate)."""
    share = min(done / total, 0.99) if total > 0 else 0.0
    filled = int(share * width)
    return "[" + "#" * filled + "." * (width - filled) + "]"


class SetupProgress:
    """`orch setup`'s display: a line as each agent starts and ends (sizes and time), and on a terminal a bar
    under it, the install's size on disk against its pinned size; elsewhere (CI's log) only those lines."""

    def __init__(self, stream: TextIO, tty: bool, measure: Callable[[], int], size_mb: int) -> None:
        self.bar = StatusBar(stream) if tty else None
        self.measure, self.size_mb = measure, size_mb
        self.started = time.monotonic()

    def tick(self) -> None:
        if self.bar is not None:
            done = self.measure()
            self.bar.set(f"  {bar(done, self.size_mb)} {done} of about {self.size_mb} MB  {self.elapsed():.0f} s")

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def close(self) -> None:
        if self.bar is not None:
            self.bar.clear()

"""The TUI driven in-process by Textual's own pilot: tiles following hook events, the bus filter, keys that
act on a real scripted fleet, a tiny terminal, 32 workers, a folder that vanishes; then once for real in tmux."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

from orch import procs
from orch.errors import NotFoundError
from orch.fleet import launch
from orch.notify.follow import mute
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import ContainerInfo, ControllerEvent, RunStatus
from orch.view.actions import ACTION_TIMEOUT, GENERIC_NUDGE
from orch.view.tui import FleetScreen, WatchApp, run_tui
from orch.view.widgets import NeedsList, PaneScreen, Tile, need_text
from orch.waits import wait_until
from tests.helpers import orch, prompts, run_info
from tests.notify.hostile import HOSTILE, carries
from tests.view.browser import ARTIFACTS
from tests.view.fakerun import hook, lead_run

DEADLINE = 30.0


async def until(pilot: Pilot[int], check: Callable[[], object], reason: str, timeout: float = DEADLINE) -> None:
    """Let the app run until `check` holds (a deadline and a reason, never a fixed sleep)."""
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {reason}")
        await pilot.pause(0.05)


def fleet_screen(app: WatchApp) -> FleetScreen:
    screen = app.screen
    assert isinstance(screen, FleetScreen), screen
    return screen


def tile(app: WatchApp, n: int) -> Tile:
    return fleet_screen(app).tiles[n]


def events(run: RunFolder) -> list[ControllerEvent]:
    return [ControllerEvent.model_validate_json(line) for line in run.events.read_text().splitlines()]


def test_a_tile_follows_a_hook_event_and_the_bus_filters(orch_home: Path) -> None:
    run = lead_run()

    async def drive() -> None:
        app = WatchApp(run)
        async with app.run_test(size=(140, 40)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, FleetScreen), "the fleet screen")
            assert "idle" in tile(app, 2).plain and "W3 claude-b" in tile(app, 3).plain
            assert "busy (Bash)" in tile(app, 3).plain and "pages-F1.v2 (verifier)" in tile(app, 3).plain
            hook(run, 2, "PreToolUse", tool_name="Grep")
            await until(pilot, lambda: "busy (Grep)" in tile(app, 2).plain, "W2's tile to show its tool call")
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            app.save_screenshot("watch-tui.svg", str(ARTIFACTS))  # an artifact (the docs: scripts/screenshots.py)
            screen = fleet_screen(app)
            assert len(screen.bus_shown) == 2
            await pilot.press("slash", *"checking")
            await until(pilot, lambda: len(screen.bus_shown) == 1, "the bus filter")
            assert screen.bus_shown[0].endswith("[W3] checking F1 now")

    asyncio.run(drive())


def test_tiny_terminal_32_workers_and_a_vanishing_folder(orch_home: Path) -> None:
    run = lead_run("big", workers=32)

    async def drive() -> None:
        app = WatchApp(run)
        async with app.run_test(size=(40, 10)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, FleetScreen), "the fleet screen")
            screen = fleet_screen(app)
            assert len(screen.tiles) == 32 and not screen.query_one("#side").display
            for _ in range(33):  # around the whole fleet and one more
                await pilot.press("right")
            assert screen.selected == 2 and tile(app, 2).has_class("selected")
            await pilot.resize_terminal(200, 50)
            await until(pilot, lambda: screen.query_one("#side").display, "the side panel on a wide terminal")
            shutil.rmtree(run.root)
            await until(pilot, lambda: "vanished" in screen.notice, "the view to notice the folder is gone")
            assert "W32" in tile(app, 32).plain  # the last that was seen stays
            await pilot.press("q")

    asyncio.run(drive())


def test_miniatures_of_a_container_run_are_refused_off_the_apps_thread(orch_home: Path) -> None:
    """`m` on a run whose panes this machine cannot read cheaply (a container's): the captures' thread finds
    that out, says so, and the miniatures turn off again; the key itself asked nothing of anyone."""
    run = RunFolder.for_name("boxed")
    run.create(run_info("boxed", workers=2, container=ContainerInfo(name="orch-boxed", image="i", host_run_dir="/x")))

    async def drive() -> None:
        app = WatchApp(run)
        async with app.run_test(size=(140, 40)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, FleetScreen), "the fleet screen")
            screen = fleet_screen(app)
            await pilot.press("m")
            await until(pilot, lambda: not screen.miniatures, "the miniatures to turn off again")
            said = [n.message for n in app._notifications]
            assert said == ["pane miniatures need a local run: Enter shows a worker's full screen"], said
            assert tile(app, 1).mini == tile(app, 2).mini == ""

    asyncio.run(drive())


def test_the_run_picker(orch_home: Path) -> None:
    lead_run("one")

    async def drive() -> None:
        app = WatchApp(None)
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, FleetScreen), "the picked run's screen")
            assert fleet_screen(app).run.name == "one"

    asyncio.run(drive())
    with pytest.raises(NotFoundError):
        run_tui(RunFolder.for_name("nope"))


@pytest.fixture
def fleet(tmp_path: Path) -> RunFolder:
    workdir = tmp_path / "work"
    workdir.mkdir()
    result = orch("up", "tv", "-n", "2", "--agent", "scripted", "--workdir", workdir, "--local")
    assert result.exit_code == 0, result.output
    return RunFolder.for_name("tv")


def test_keys_act_through_the_cli_and_are_logged(fleet: RunFolder) -> None:
    run = fleet

    def actions() -> list[dict[str, object]]:
        return [e.data for e in events(run) if e.event is Event.WATCH_ACTION]

    async def drive() -> None:
        app = WatchApp(run)
        async with app.run_test(size=(140, 40)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, FleetScreen), "the fleet screen")
            await until(pilot, lambda: "idle" in tile(app, 2).plain, "worker 2 idle")
            await pilot.press("right", "s")
            await pilot.press(*"hello from the view", "enter")
            # Each action is the CLI's command in a child process (seconds to start on a loaded machine), logged
            # when it ends, within its own ACTION_TIMEOUT however it ended: waited for, then what it did is read.
            await until(pilot, lambda: actions(), "the send's outcome", ACTION_TIMEOUT)
            assert actions()[0] == {"action": "send", "by": "tui", "ok": True, "said": "delivered to worker 2",
                                    "chars": 19}  # fmt: skip
            assert prompts(run, 2) == ["hello from the view"]  # acknowledged before `orch send` ended
            await pilot.press("m")  # live miniatures of the panes (a local run)
            await until(pilot, lambda: tile(app, 1).mini and tile(app, 2).mini, "the panes' miniatures")
            assert "W2 scripted" in tile(app, 2).plain
            await until(pilot, lambda: tile(app, 2).outer_size.height == 10, "the tiles to grow by the miniature")
            await miniatures_off_during_a_capture(pilot, app, run)
            await pilot.press("n")
            await until(pilot, lambda: len(actions()) == 2, "the nudge's outcome", ACTION_TIMEOUT)
            assert actions()[1]["ok"] and prompts(run, 2)[1:] == [GENERIC_NUDGE]
            await pilot.press("enter")  # worker 2's full screen, read-only
            await until(pilot, lambda: isinstance(app.screen, PaneScreen), "the worker's screen")
            await pilot.press("escape")
            await pilot.press("r")
            await pilot.press("y")
            await until(pilot, lambda: len(actions()) == 3, "the restart's outcome", ACTION_TIMEOUT)
            assert actions()[2]["ok"] and any(e.event is Event.RESTARTED and e.worker == 2 for e in events(run))
            await pilot.press("q")
        # Quitting leaves the fleet running.
        assert launch.server_for(run.info()).alive()

        app = WatchApp(run)
        async with app.run_test(size=(140, 40)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, FleetScreen), "the fleet screen")
            await pilot.press("K", "n")  # not confirmed: nothing happens
            await pilot.press("K", "y")
            await until(pilot, lambda: len(actions()) == 4, "the kill's outcome", ACTION_TIMEOUT)
            assert [a["action"] for a in actions()] == ["send", "nudge", "restart", "kill"]
            assert actions()[3]["ok"] and run.info().status is RunStatus.STOPPED
            screen = fleet_screen(app)
            await until(pilot, lambda: screen.snap is not None and screen.snap.status is RunStatus.STOPPED, "stopped")

    asyncio.run(drive())


def tmux_clients() -> list[str]:
    """The tmux commands this test's process runs now (its threads': the run's tmux server is no child)."""
    clients = [procs.cmdline(pid) for pid in procs.tree(os.getpid())]
    return [" ".join(argv) for argv in clients if argv and Path(argv[0]).name == "tmux"]


async def miniatures_off_during_a_capture(pilot: Pilot[int], app: WatchApp, run: RunFolder) -> None:
    """`m` again while the miniatures' thread is in the middle of a capture (the run's tmux server stopped: a
    hung server, or a loaded machine's slow one): the toggle asks tmux nothing, so the view answers at once
    (every tmux call waits up to a minute: on the app's thread it froze the view); the capture that ends after
    the toggle is not drawn, and no miniature stays."""
    socket = launch.server_for(run.info()).socket_name
    shown = subprocess.run(["tmux", "-L", socket, "display", "-p", "#{pid}"], capture_output=True, text=True)
    server = int(shown.stdout)
    screen = fleet_screen(app)
    os.kill(server, signal.SIGSTOP)
    try:
        await until(pilot, lambda: tmux_clients(), "the miniatures' next capture to wait on tmux")
        waiting = tmux_clients()
        await pilot.press("m")
        assert not screen.miniatures and tile(app, 1).mini == tile(app, 2).mini == ""
        was = screen.selected
        await pilot.press("left")  # the view goes on answering keys, the server still stopped
        await until(pilot, lambda: screen.selected != was, "the selection to move while tmux hangs")
        await pilot.press("right")
        await until(pilot, lambda: screen.selected == was, "the selection to move back")
        assert tmux_clients() == waiting  # the capture's call alone: the toggle started none
    finally:
        os.kill(server, signal.SIGCONT)
    await until(
        pilot, lambda: all(w.is_finished for w in screen.workers if w.group == "miniatures"), "the capture to end"
    )
    assert tile(app, 1).mini == tile(app, 2).mini == ""


def test_the_tui_for_real_in_tmux(tmp_path: Path, orch_home: Path, tmux_tmpdir: Path) -> None:
    run = lead_run("real")
    sock = str(tmux_tmpdir / "view.sock")  # short: socket paths are limited to ~100 bytes
    cmd = f"{sys.executable} -c 'from orch.cli.main import main; main()' watch real"
    tmux = ["tmux", "-S", sock]
    subprocess.run([*tmux, "new-session", "-d", "-x", "140", "-y", "40", cmd], check=True)
    try:

        def screen() -> str:
            return subprocess.run([*tmux, "capture-pane", "-p"], capture_output=True, text=True, check=False).stdout

        wait_until(lambda: "pages-F1.v2" in screen(), DEADLINE, "the view to draw in tmux")
        hook(run, 1, "PreToolUse", tool_name="Glob")
        wait_until(lambda: "busy (Glob)" in screen(), DEADLINE, "the hook event on screen")
        subprocess.run([*tmux, "send-keys", "q"], check=True)
        wait_until(
            lambda: subprocess.run([*tmux, "has-session"], capture_output=True).returncode != 0,
            DEADLINE, "the view to quit",
        )  # fmt: skip
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, check=False)


def test_a_need_is_listed_once_rung_and_opens_its_workers_screen(orch_home: Path) -> None:
    """A permission left to a person (with hostile text) shows in the needs list as plain text, rings once (a
    toast; the bell and OSC go through the driver, which a headless app does not write), and `j` (or Enter on it)
    opens that worker's screen. Answered, it leaves the list; a muted run lists but does not ring."""
    run = lead_run()

    async def drive() -> None:
        app = WatchApp(run)
        async with app.run_test(size=(160, 45)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, FleetScreen), "the fleet screen")
            needs = app.screen.query_one(NeedsList)
            assert not needs.needs and needs.styles.display == "none"
            hook(run, 2, "PermissionRequest", tool_name="Bash", tool_input=json.dumps({"command": HOSTILE}))
            await until(pilot, lambda: len(needs.needs) == 1, "the need in the list")
            shown = need_text(needs.needs[0]).plain
            assert "W2 waits on a permission: Bash:" in shown and carries(shown) == [] and needs.display
            screen = fleet_screen(app)
            assert screen.rang == needs.needs  # rung once: a toast, and (not headless) the bell and OSC 9/777
            assert app._driver is not None, "widgets.ring writes OSC 9/777 through Textual's (private) driver"
            await pilot.press("j")
            await until(pilot, lambda: isinstance(app.screen, PaneScreen), "W2's screen")
            pane = app.screen
            assert isinstance(pane, PaneScreen) and pane.n == 2
            await pilot.press("escape")
            hook(run, 2, "PreToolUse", tool_name="Bash")  # answered
            await until(pilot, lambda: not needs.needs, "the need to leave the list")
            mute(run, True)
            hook(run, 3, "PermissionRequest", tool_name="WebFetch")
            await until(pilot, lambda: len(needs.needs) == 1, "the muted run's need in the list")
            assert len(screen.rang) == 1  # not rung

    asyncio.run(drive())

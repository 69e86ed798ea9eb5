"""Regenerate the docs' pictures from a real run: `.venv/bin/python scripts/screenshots.py`.

It runs `orch demo --changes --local` (real Claude Code and Codex writers, orch's scripted model, offline) in
a private ORCH_HOME and, while it runs, once its changes panel holds a landed change, takes `orch watch`'s
two views of it: the page `orch watch --web` serves, through headless Chromium (docs/images/watch-web.png),
and the terminal view through Textual's own screenshot (docs/images/watch-tui.svg). A minute or two; CI does
not run it, its output is committed. Needs the pinned Claude Code and Codex CLI (`orch setup --agents
claude,codex`) and Chromium.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.view.browser: the DevTools client the web view's tests drive

from textual.widgets import Static  # noqa: E402

from orch.entry.demo import CHANGES_NAME  # noqa: E402
from orch.run.folder import RunFolder  # noqa: E402
from orch.view.tui import FleetScreen, WatchApp  # noqa: E402
from tests.view.browser import chromium  # noqa: E402

IMAGES = REPO / "docs" / "images"
ORCH = [sys.executable, "-c", "from orch.cli.main import main; main()"]
TUI_SIZE = (160, 46)


async def started(home: Path) -> tuple[asyncio.subprocess.Process, RunFolder]:
    """The demo, started; its run once its folder exists (a deadline: 120 s)."""
    os.environ["ORCH_HOME"] = str(home)
    demo = await asyncio.create_subprocess_exec(*ORCH, "demo", "--changes", "--local", stdout=subprocess.DEVNULL)
    run = RunFolder.for_name(CHANGES_NAME)
    for _ in range(1200):
        if run.exists():
            return demo, run
        await asyncio.sleep(0.1)
    raise SystemExit("screenshots: the demo's run folder never appeared")


async def tui(run: RunFolder) -> Path:
    app = WatchApp(run)
    async with app.run_test(size=TUI_SIZE) as pilot:
        for _ in range(200):  # the fleet screen, its changes read (a deadline: 10 s)
            screen = app.screen
            if isinstance(screen, FleetScreen) and "LANDED" in str(screen.query_one("#changes", Static).render()):
                break
            await pilot.pause(0.05)
        else:
            raise SystemExit("screenshots: the terminal view never showed the changes")
        app.save_screenshot("watch-tui.svg", str(IMAGES))
    return IMAGES / "watch-tui.svg"


async def web(run: RunFolder, profile: Path) -> Path:
    server = await asyncio.create_subprocess_exec(
        *ORCH, "watch", run.name, "--web", "--port", "0", stdout=asyncio.subprocess.PIPE
    )
    try:
        assert server.stdout is not None
        url = (await asyncio.wait_for(server.stdout.readline(), 30)).decode().strip()
        async with chromium(profile) as browser:
            page = await browser.open(url)
            landed = "[...document.querySelectorAll('#changes li')].some(li => li.textContent.includes('LANDED'))"
            await page.until(landed, "a change to land", timeout=300)
            return await page.screenshot(IMAGES / "watch-web.png")
    finally:
        server.terminate()
        await server.wait()


async def shots(tmp: Path) -> list[Path]:
    demo, run = await started(tmp / "home")
    made = [await web(run, tmp / "chromium"), await tui(run)]
    if await demo.wait() != 0:
        raise SystemExit(f"screenshots: the demo did not come out as designed (exit {demo.returncode})")
    return made


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="orch-shots-") as tmp:
        for made in asyncio.run(shots(Path(tmp))):
            print(f"screenshots: wrote {made.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`orch watch --web` in headless Chromium: the page loads with no network, follows new events, refuses a
wrong token, and takes actions only with --control; a screenshot is kept as an artifact."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import pytest

from orch.jobs.state import ChangeBook, load_state, save_state
from orch.run import bus
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent
from orch.view.actions import ACTION_TIMEOUT, GENERIC_NUDGE
from tests.helpers import orch, prompts
from tests.notify.hostile import HOSTILE, carries
from tests.view.browser import ARTIFACTS, chromium
from tests.view.fakerun import HOSTILE_REASON, hook, lead_run

pytestmark = pytest.mark.browser


class Served:
    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc, self.url = proc, url
        self.base, _, query = url.partition("/?")
        self.token = query.split("&")[0].removeprefix("t=")


Serve = Callable[..., Served]
"""Starts `orch watch NAME --web FLAGS...` and returns where it serves."""


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    started: list[subprocess.Popen[str]] = []

    def start(name: str, *flags: str) -> Served:
        named = [name] if name else []
        argv = [sys.executable, "-c", "from orch.cli.main import main; main()", "watch", *named, "--web", *flags]
        log = tmp_path / f"web-{len(started)}.log"
        with log.open("w") as err:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True)
        started.append(proc)
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and "?t=" in url, (url, log.read_text())
        return Served(proc, url)

    yield start
    for proc in started:
        proc.terminate()
        proc.wait(10)


def test_the_page_with_no_network_follows_the_run(orch_home: Path, tmp_path: Path, serve: Serve) -> None:
    run = lead_run(changes=True)
    web = serve("lr")

    async def drive() -> None:
        async with chromium(tmp_path / "profile") as browser:
            page = await browser.open(web.url)
            await page.until("document.querySelectorAll('.tile').length === 3", "the three tiles")
            assert await page.evaluate("document.querySelector('[data-worker=\"3\"] .state').textContent") == (
                "busy (Bash)"
            )
            assert await page.evaluate("document.querySelectorAll('#timeline rect.bar').length") == 3
            assert await page.evaluate("document.querySelectorAll('#costs polyline').length") == 3
            assert "CONFIRMED" in await page.evaluate("document.getElementById('matrix').textContent")
            # The changes panel: the queue's lines, a hostile reason shown as text and never run.
            changes = await page.evaluate("[...document.querySelectorAll('#changes li')].map(li => li.textContent)")
            assert changes == ["change fix (fix, W1): LANDED", f"change fix2 (fix, W1): REJECTED: {HOSTILE_REASON}"]
            assert await page.evaluate("document.querySelectorAll('#changes script, #changes img').length") == 0
            assert await page.evaluate("document.querySelector('#changes li').className") == "c-LANDED"
            # Nothing but this server was reached: every resource came from its origin. (The page's style and
            # script are inline; its SSE stream is listed only once a response of it has ended, so the list
            # may be empty.)
            urls = await page.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
            assert all(u.startswith(web.base) for u in urls), urls
            await page.screenshot(ARTIFACTS / "watch-web.png")
            # New lines land on the page (SSE): a hook event, a bus line, a commentary line.
            hook(run, 2, "PreToolUse", tool_name="Grep")
            bus.post(run, 2, "<b>not html</b> from W2")
            run.log_event(ControllerEvent(event=Event.NUDGE_SENT, worker=1, data={"job": "pages"}))
            state = load_state(run)
            state.changes.append(ChangeBook(id="fix3", task="fix", writer=2, base="b2"))
            save_state(run, state)
            await page.until(
                "document.querySelector('[data-worker=\"2\"] .state').textContent === 'busy (Grep)'", "W2's tile"
            )
            await page.until("document.getElementById('bus').textContent.includes('<b>not html</b> from W2')", "bus")
            assert await page.evaluate("document.querySelectorAll('#bus b').length") == 0  # text, never markup
            await page.until("document.getElementById('commentary').textContent.includes('nudged on pages')", "nudge")
            await page.until("document.getElementById('changes').textContent.includes('change fix3')", "a new change")
            assert await page.evaluate("typeof window.pwned") == "undefined"
            await page.evaluate(
                "(() => { const f = document.getElementById('filter'); f.value = 'checking';"
                " f.dispatchEvent(new Event('input')); })()"
            )
            assert await page.evaluate("document.querySelectorAll('#bus li').length") == 1
            # Read-only: no buttons, and the server refuses an action even with the right token.
            assert await page.evaluate("document.querySelectorAll('.tile button').length") == 0
            status = await page.evaluate(
                f"fetch('/api/action?run=lr', {{method: 'POST', headers: {{'X-Orch-Token': '{web.token}'}},"
                " body: JSON.stringify({action: 'kill'})}).then(r => r.status)"
            )
            assert status == 403
            # The run folder vanishes while watched: the page says so and keeps the last that was seen.
            shutil.rmtree(run.root)
            await page.until("!document.getElementById('banner').hidden", "the banner")
            assert await page.evaluate("document.querySelectorAll('.tile').length") == 3

    asyncio.run(drive())


def test_a_wrong_token_is_refused(orch_home: Path, tmp_path: Path, serve: Serve) -> None:
    lead_run()
    web = serve("lr")

    async def drive() -> None:
        async with aiohttp.ClientSession() as http:
            for path in ("/?t=wrong&run=lr", "/?run=lr", "/api/snapshot?t=&run=lr", "/api/events?t=nope&run=lr"):
                async with http.get(web.base + path) as res:
                    assert res.status == 403, path
            async with http.post(f"{web.base}/api/action?t={web.token}&run=lr", json={"action": "kill"}) as res:
                assert res.status == 403  # the token must come in the header for an action
            async with http.get(f"{web.base}/api/snapshot?t={web.token}&run=nope") as res:
                assert res.status == 404
        async with chromium(tmp_path / "profile") as browser:
            page = await browser.open(f"{web.base}/?t=wrong&run=lr")
            assert "wrong or missing token" in await page.evaluate("document.body.textContent")

    asyncio.run(drive())


def test_unknown_run_is_one_line(orch_home: Path) -> None:
    result = orch("watch", "nope", "--web")
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output


SAID = "document.getElementById('said').textContent"
"""The answer to the page's last action, as the page shows it."""


def test_control_acts_from_the_page(tmp_path: Path, serve: Serve) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    assert orch("up", "wc", "-n", "2", "--agent", "scripted", "--workdir", workdir, "--local").exit_code == 0
    run = RunFolder.for_name("wc")
    web = serve("wc", "--control")

    async def drive() -> None:
        async with chromium(tmp_path / "profile") as browser:
            page = await browser.open(web.url)
            await page.until("document.querySelectorAll('.tile button').length === 6", "the buttons")
            await page.until("!document.getElementById('controls').hidden", "the run's controls (render finished)")
            assert "no findings yet" in await page.evaluate("document.getElementById('matrix').textContent")
            assert await page.evaluate("document.getElementById('changes').textContent") == "no changes"
            page.dialog_answer = "hello from the page"
            await page.evaluate("document.querySelector('[data-worker=\"1\"] button').click()")  # send
            # The server runs the CLI's command in a child process (seconds to start under load) and answers when
            # it ends, within its own ACTION_TIMEOUT however it ended: the answer is waited for, then read.
            said = await page.until(SAID, "the send's answer", ACTION_TIMEOUT)
            assert said == "delivered to worker 1" and prompts(run, 1) == ["hello from the page"]
            await page.evaluate("document.getElementById('said').textContent = ''")
            await page.evaluate("document.querySelectorAll('[data-worker=\"2\"] button')[1].click()")  # nudge
            said = await page.until(SAID, "the nudge's answer", ACTION_TIMEOUT)
            assert said == "delivered to worker 2" and prompts(run, 2) == [GENERIC_NUDGE]
            await page.until(
                "document.getElementById('commentary').textContent.includes('nudge from orch watch')", "log"
            )
            await page.screenshot(ARTIFACTS / "watch-web-control.png")
        logged = [ControllerEvent.model_validate_json(line) for line in run.events.read_text().splitlines()]
        actions = [(e.data["action"], e.data["by"], e.data["ok"]) for e in logged if e.event is Event.WATCH_ACTION]
        assert actions == [("send", "web", True), ("nudge", "web", True)]

    asyncio.run(drive())


def test_without_a_name_the_page_lists_runs(orch_home: Path, tmp_path: Path, serve: Serve) -> None:
    lead_run("first")
    lead_run("second", workers=2)
    web = serve("")

    async def drive() -> None:
        async with chromium(tmp_path / "profile") as browser:
            page = await browser.open(web.url)
            await page.until("document.querySelectorAll('#runs tbody tr').length === 2", "the runs")
            await page.evaluate("document.querySelector('#runs a[href*=\"run=second\"]').click()")
            await page.until("document.querySelectorAll('.tile').length === 2", "the picked run's tiles")

    asyncio.run(drive())


def test_the_needs_list_and_its_link_to_a_worker(orch_home: Path, tmp_path: Path, serve: Serve) -> None:
    """A permission left to a person, with hostile text, is listed as text; its link (the page's own #w2, as a
    notification's URL ends) shows that worker's tile; the tab's title counts what needs you."""
    run = lead_run()
    web = serve("lr")

    async def drive() -> None:
        async with chromium(tmp_path / "profile") as browser:
            page = await browser.open(web.url)
            await page.until("document.querySelectorAll('.tile').length === 3", "the tiles")
            assert await page.evaluate("document.getElementById('needs-box').hidden") is True
            hook(run, 2, "PermissionRequest", tool_name="Bash", tool_input=json.dumps({"command": HOSTILE}))
            await page.until("!document.getElementById('needs-box').hidden", "the needs list")
            shown = await page.evaluate("document.getElementById('needs').textContent")
            assert "W2 permission: Bash:" in shown and "orch attach lr 2 --write" in shown
            assert carries(shown) == []
            assert await page.evaluate("document.querySelectorAll('#needs a').length") == 1
            assert await page.evaluate("document.querySelector('#needs a').getAttribute('href')") == "#w2"
            assert await page.evaluate("document.querySelectorAll('#needs b, #needs img, #needs script').length") == 0
            assert await page.evaluate("document.title") == "(1) orch watch"
            await page.evaluate("document.querySelector('#needs a').click()")
            await page.until("document.body.dataset.shown === '2'", "W2's tile shown")  # (flashed for 2 s)
            hook(run, 2, "PreToolUse", tool_name="Bash")  # answered: off the list
            await page.until("document.getElementById('needs-box').hidden", "the list to empty")
            assert await page.evaluate("document.title") == "orch watch"
            linked = await browser.open(web.url + "#w3")  # a notification's link: the worker's tile at once
            await linked.until("document.body.dataset.shown === '3'", "W3's tile shown")

    asyncio.run(drive())

"""Headless Chromium (Debian's chromium package) driven over the DevTools protocol with aiohttp's websocket
client: open a page, evaluate script in it, answer its dialogs, take a screenshot. Names that do not
resolve to 127.0.0.1 fail to resolve, so a page that reaches for the network shows it."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

START_TIMEOUT = 60.0
CALL_TIMEOUT = 30.0
DEVTOOLS = re.compile(r"DevTools listening on (ws://\S+)")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
"""Screenshots the tests keep (gitignored); the docs' come from scripts/screenshots.py, which drives this too."""


def chromium_or_skip() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.fail("chromium is missing: .ci/run installs it (apt-get install chromium)")
    return path


NAVIGATED = ("Inspected target navigated or closed", "Execution context was destroyed")
"""What Chromium answers a call made while the page navigates away: `until` asks the next page again."""


class Page:
    def __init__(self, browser: Browser, session: str) -> None:
        self.browser, self.session = browser, session
        self.dialog_answer: str | None = None
        """What to type into a prompt() (None: dismiss it); confirm() is accepted when not None."""

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        return await self.browser.call(method, params, self.session)

    async def evaluate(self, expression: str) -> Any:
        reply = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in reply:
            raise AssertionError(f"{expression}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    async def until(self, expression: str, reason: str, timeout: float = 20.0) -> Any:
        """Evaluate until truthy (a deadline and a reason)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while True:
            try:
                value = await self.evaluate(expression)
            except AssertionError as error:  # a navigation (a click the test made) ended the page it asked
                if not any(said in str(error) for said in NAVIGATED):
                    raise
                value = None
            if value:
                return value
            if loop.time() > end:
                raise AssertionError(f"timed out after {timeout:g}s waiting for {reason} ({expression})")
            await asyncio.sleep(0.02)

    async def screenshot(self, path: Path) -> Path:
        shot = await self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


class Browser:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.pages: dict[str, Page] = {}
        self.reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self.waiting:
                self.waiting.pop(data["id"]).set_result(data)
            elif data.get("method") == "Page.javascriptDialogOpening":
                page = self.pages.get(data.get("sessionId", ""))
                answer = page.dialog_answer if page else None
                params = {"accept": answer is not None, "promptText": answer or ""}
                asyncio.get_running_loop().create_task(
                    self.call("Page.handleJavaScriptDialog", params, data.get("sessionId"))
                )

    async def call(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        n = next(self.ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[n] = future
        message: dict[str, Any] = {"id": n, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        await self.ws.send_str(json.dumps(message))
        reply = await asyncio.wait_for(future, CALL_TIMEOUT)
        if "error" in reply:
            raise AssertionError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    async def open(self, url: str) -> Page:
        target = await self.call("Target.createTarget", {"url": "about:blank"})
        attached = await self.call("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})
        page = Page(self, attached["sessionId"])
        self.pages[page.session] = page
        await page.call("Page.enable")
        await page.call("Runtime.enable")
        await page.call("Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1, mobile=False)
        await page.call("Page.navigate", url=url)
        await page.until("document.readyState === 'complete'", "the page to load")
        return page


@contextlib.asynccontextmanager
async def chromium(profile: Path) -> AsyncIterator[Browser]:
    """A fresh headless Chromium (its own profile), stopped on exit."""
    argv = [
        chromium_or_skip(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", "--remote-debugging-port=0", "--remote-allow-origins=*",
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1", "about:blank",
    ]  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    try:
        assert proc.stderr is not None
        url = None
        async with asyncio.timeout(START_TIMEOUT):
            while url is None:
                line = (await proc.stderr.readline()).decode(errors="replace")
                if not line:
                    raise AssertionError("chromium exited before its DevTools endpoint was up")
                found = DEVTOOLS.search(line)
                url = found.group(1) if found else None
        drain = asyncio.get_running_loop().create_task(proc.stderr.read())  # keep its pipe from filling
        async with aiohttp.ClientSession() as http, http.ws_connect(url, max_msg_size=0) as ws:
            browser = Browser(ws)
            try:
                yield browser
            finally:
                browser.reader.cancel()
        drain.cancel()
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()

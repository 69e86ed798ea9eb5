"""`orch watch --web` against a hostile worker, without a browser (the DOM side: tests/view/test_web.py): the page
is orch's template alone under the request's nonce, and what workers wrote reaches the page only as JSON data
(drawn with textContent) or inside the charts' SVG, escaped."""

from __future__ import annotations

import asyncio
import re
import xml.etree.ElementTree as ET
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from orch.jobs.state import load_state, save_state
from orch.run import bus
from orch.run.folder import RunFolder
from orch.sse import SseParser
from orch.view.web import WebView
from tests.view.fakerun import lead_run

EVIL = """<script>window.pwned=1</script><img src=x onerror='window.pwned=1'> " &amp;"""
TOKEN = "t0ken"


def hostile_run() -> RunFolder:
    """A run whose finding claim, a job id (on the timeline) and a bus line are a worker's markup."""
    run = lead_run(changes=True)
    state = load_state(run)
    state.findings[0].finding.claim = EVIL
    state.jobs[0].id = EVIL
    save_state(run, state)
    bus.post(run, 2, EVIL)
    return run


def served(run: RunFolder) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The page, its headers, and the snapshot the page would draw."""

    async def get() -> tuple[str, dict[str, str], dict[str, Any]]:
        async with TestClient(TestServer(WebView(run, False, TOKEN).app())) as client:
            page = await client.get(f"/?t={TOKEN}&run={run.name}")
            snap = await client.get(f"/api/snapshot?t={TOKEN}&run={run.name}")
            assert page.status == 200 and snap.status == 200
            return await page.text(), dict(page.headers), await snap.json()

    return asyncio.run(get())


def test_the_page_is_orchs_alone_and_workers_text_comes_as_data() -> None:
    page, headers, data = served(hostile_run())
    # The page: orch's template, its one style and one script carrying the CSP's nonce; no worker text.
    (nonce,) = re.findall(r"script-src 'nonce-([^']+)'", headers["Content-Security-Policy"])
    assert page.count("<script") == 1 and f'<script nonce="{nonce}">' in page and f'<style nonce="{nonce}">' in page
    assert "pwned" not in page and "{{" not in page
    # The data: the worker's text exactly as written (the page sets it with textContent, so it is not escaped
    # twice), and nothing of it as markup in the SVG the page puts in with innerHTML.
    snap = data["snapshot"]
    assert [row["claim"] for row in snap["matrix"]] == [EVIL]
    assert EVIL in [line["text"] for line in snap["bus"]]
    timeline = ET.fromstring(data["timeline"])
    assert not [e for e in timeline.iter() if not e.tag.startswith("{http://www.w3.org/2000/svg}")]
    assert EVIL in [e.get("data-job") for e in timeline.iter()]
    assert not any(name.startswith("on") for e in timeline.iter() for name in e.attrib)
    assert "<script" not in data["timeline"] and "<script" not in data["costs"]


def test_the_event_stream_carries_the_snapshot_whole() -> None:
    """The stream's first event (framed by orch.sse) is the snapshot the page would fetch, a worker's markup
    inside it included, parsed as an SSE client parses it (orch.sse's tests: line ends in the data)."""
    run = hostile_run()

    async def get() -> tuple[list[dict[str, Any]], dict[str, Any], str]:
        async with TestClient(TestServer(WebView(run, False, TOKEN).app())) as client:
            snap = await (await client.get(f"/api/snapshot?t={TOKEN}&run={run.name}")).json()
            res = await client.get(f"/api/events?t={TOKEN}&run={run.name}")
            parser, events = SseParser(), list[dict[str, Any]]()
            while not events:
                events = parser.feed(await res.content.readany())
            res.close()
            return events, snap, res.headers["Content-Type"]

    events, snap, kind = asyncio.run(get())
    assert kind == "text/event-stream" and events == [snap]
    assert EVIL in [line["text"] for line in events[0]["snapshot"]["bus"]]

"""A real webhook receiver on loopback (aiohttp, on a thread of its own): it records each POST with the time it
arrived, and answers with the statuses a test asks for, when it says."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from orch.waits import wait_until


@dataclass
class Post:
    at: float
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    port: int = 0
    posts: list[Post] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)
    """Statuses to answer with, in turn (then 200)."""
    hold: threading.Event | None = None
    """When set here, each answer waits until it is set (a slow webhook, as long as the test says; 30 s at most)."""

    def url(self, path: str = "hook") -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Post]:
        wait_until(lambda: len(self.posts) >= count, timeout, f"{count} post(s) at the receiver", interval=0.01)
        return self.posts[:count]

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.posts.append(Post(time.time(), request.path, dict(request.headers), body))
        if self.hold is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.hold.wait, 30.0)
        return web.Response(status=self.answers.pop(0) if self.answers else 200, text="ok")


def serve() -> Iterator[Receiver]:
    """A receiver for the test (a generator for a fixture): stopped after it."""
    receiver = Receiver()
    ready = threading.Event()
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/{path:.*}", receiver.handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        receiver.port = runner.addresses[0][1]
        ready.set()
        await stop.wait()
        await runner.cleanup()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield receiver
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()

"""A real collector on loopback (orch.backends.swarm.collector), for the syncer's and the collector's tests."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web

from orch.backends.swarm.collector import Home, app

TOKEN = "token-of-life-1"


@dataclass
class Served:
    home: Home
    target: str
    stop: Callable[[], None]


def serve(home: Home, life: int = 1, token: str = TOKEN) -> Served:
    """The collector of `home`, serving `life` on a free loopback port in a thread of its own."""
    sock = socket.create_server(("127.0.0.1", 0))
    loop = asyncio.new_event_loop()

    async def setup() -> web.AppRunner:
        runner = web.AppRunner(app(home, life, token), access_log=None)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        return runner

    runner = loop.run_until_complete(setup())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def stop() -> None:
        if not thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)

    return Served(home, f"127.0.0.1:{sock.getsockname()[1]}", stop)


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[Served]:
    served = serve(Home(tmp_path / "collector"))
    yield served
    served.stop()

"""A local strict worker's CONNECT proxy (orch.backends.local.egressproxy) on a real socket: a listed name goes
through (to a server of the test's own, reached by a name the test resolves: the proxy's resolver and dialer
given at its constructor), and an unlisted name, an IP literal, a listed name that resolves to loopback and a
plain-HTTP request are refused with `egress-refused` events, rate-limited; tunnels past the cap are refused.
The same proxy inside real bubblewrap sandboxes, through the relay: tests/fleet/test_localegress.py."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from orch.backends.local.connections import ConnectionCap
from orch.backends.local.egressproxy import EgressProxy, Streams, system_lookup
from orch.run.events import Event
from orch.run.folder import RunFolder
from tests.helpers import run_events, run_info

PUBLIC = "93.184.216.34"  # what the test's resolver says pkg.test is: a global address, dialed to the test's server


@pytest.fixture
def run(tmp_path: Path) -> RunFolder:
    folder = RunFolder.for_name("egressrun")
    folder.create(run_info("egressrun", workers=2, workdir=str(tmp_path)))
    return folder


def _refusals(run: RunFolder) -> list[dict[str, Any]]:
    return run_events(run, Event.EGRESS_REFUSED)


@asynccontextmanager
async def _proxy(
    run: RunFolder, path: Path, limit: int = 4, n: int = 1, hang: threading.Event | None = None
) -> AsyncIterator[list[tuple[str, int]]]:
    """Worker n's proxy at `path` over pkg.test, localhost, gone.test (which does not resolve) and slow.test
    (whose lookup hangs until `hang` is set), each on 443; yields the addresses it dialed."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1024):
            writer.write(data)
        writer.close()

    hang = hang or threading.Event()
    upstream = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = upstream.sockets[0].getsockname()[1]
    dialed: list[tuple[str, int]] = []

    def lookup(host: str, port: int) -> list[str]:
        if host == "gone.test":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        if host == "slow.test":
            hang.wait(30)  # a listed name whose DNS does not answer
        return [PUBLIC] if host in ("pkg.test", "slow.test") else system_lookup(host, port)

    async def connect(address: str, wanted: int) -> Streams:
        dialed.append((address, wanted))
        return await asyncio.open_connection("127.0.0.1", port)

    cap = ConnectionCap(run, n, path, limit)
    listed = ["pkg.test:443", "localhost:443", "gone.test:443", "slow.test:443"]
    proxy = EgressProxy(run, n, listed, cap, lookup, connect)
    server = await asyncio.start_unix_server(proxy.serve, path=str(path))
    try:
        yield dialed
    finally:
        hang.set()
        server.close()
        proxy.close()
        upstream.close()


async def _connect(path: Path, head: bytes) -> tuple[bytes, asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(head)
    status = await asyncio.wait_for(reader.readline(), 10)
    return status, reader, writer


def test_a_listed_name_goes_through_and_everything_else_is_refused_with_an_event(
    run: RunFolder, tmp_path: Path
) -> None:
    path = tmp_path / "egress.sock"

    async def go() -> dict[str, bytes]:
        seen: dict[str, bytes] = {}
        async with _proxy(run, path) as dialed:
            status, reader, writer = await _connect(path, b"CONNECT pkg.test:443 HTTP/1.1\r\nHost: pkg.test\r\n\r\n")
            assert b" 200 " in status, status
            assert await reader.readline() == b"\r\n"
            writer.write(b"ping")
            assert await asyncio.wait_for(reader.readexactly(4), 10) == b"ping"
            writer.close()
            assert dialed == [(PUBLIC, 443)]  # the address it checked, not a name resolved again
            for name, head in {
                "unlisted": b"CONNECT evil.test:443 HTTP/1.1\r\n\r\n",
                "other-port": b"CONNECT pkg.test:22 HTTP/1.1\r\n\r\n",
                "ip": b"CONNECT 93.184.216.34:443 HTTP/1.1\r\n\r\n",
                "userinfo": b"CONNECT evil.test@pkg.test:443 HTTP/1.1\r\n\r\n",
                "fragment": b"CONNECT pkg.test:443#x HTTP/1.1\r\n\r\n",
                "ip6": b"CONNECT [::1]:443 HTTP/1.1\r\n\r\n",
                "loopback": b"CONNECT localhost:443 HTTP/1.1\r\n\r\n",
                "plain": b"GET http://pkg.test/ HTTP/1.1\r\nHost: pkg.test\r\n\r\n",
                "gone": b"CONNECT gone.test:443 HTTP/1.1\r\n\r\n",
            }.items():
                seen[name], _, writer = await _connect(path, head)
                writer.close()
            again, _, writer = await _connect(path, b"CONNECT evil.test:443 HTTP/1.1\r\n\r\n")
            writer.close()
            assert b" 403 " in again
            assert dialed == [(PUBLIC, 443)]  # no refused target was ever dialed
        return seen

    seen = asyncio.run(go())
    assert all(b" 403 " in seen[k] for k in ("unlisted", "other-port", "ip", "ip6", "loopback")), seen
    assert b" 405 " in seen["plain"]
    assert b" 400 " in seen["userinfo"] and b" 400 " in seen["fragment"]  # host:port and nothing else
    assert b" 502 " in seen["gone"]  # listed, but not resolving: no policy refused it, no event
    reasons = [(e["worker"], e["data"]["reason"]) for e in _refusals(run)]
    # one event per reason (the second unlisted name is counted, not logged: rate-limited)
    assert sorted(reasons) == sorted(
        [(1, "not-listed"), (1, "ip-literal"), (1, "private-address"), (1, "not-connect"), (1, "bad-target")]
    ), reasons
    loopback = next(e for e in _refusals(run) if e["data"]["reason"] == "private-address")
    assert "127.0.0.1" in loopback["data"]["target"] or "::1" in loopback["data"]["target"]


def test_tunnels_past_the_cap_are_refused(run: RunFolder, tmp_path: Path) -> None:
    path = tmp_path / "egress.sock"

    async def go() -> bytes:
        async with _proxy(run, path, limit=2):
            held = [await _connect(path, b"CONNECT pkg.test:443 HTTP/1.1\r\n\r\n") for _ in range(2)]
            status, _, writer = await _connect(path, b"CONNECT pkg.test:443 HTTP/1.1\r\n\r\n")
            writer.close()
            for _, _, w in held:
                w.close()
            return status

    assert b" 503 " in asyncio.run(go())
    lines = [json.loads(line) for line in run.events.read_text().splitlines()]
    assert [e["data"]["socket"] for e in lines if e["event"] == Event.CONNECTIONS_CAPPED] == ["egress.sock"]


def test_a_worker_whose_lookups_hang_delays_no_other_worker(run: RunFolder, tmp_path: Path) -> None:
    """Worker 1 keeps more lookups of a listed name hanging than the loop's shared pool has threads; worker
    2's CONNECT still goes through at once: each proxy looks names up on threads of its own."""
    one, two = tmp_path / "one.sock", tmp_path / "two.sock"
    hang = threading.Event()

    async def go() -> bytes:
        async with _proxy(run, one, limit=16, hang=hang), _proxy(run, two, n=2):
            stuck = [await asyncio.open_unix_connection(str(one)) for _ in range(12)]
            for _, writer in stuck:
                writer.write(b"CONNECT slow.test:443 HTTP/1.1\r\n\r\n")
            await asyncio.sleep(0)
            status, _, writer = await asyncio.wait_for(_connect(two, b"CONNECT pkg.test:443 HTTP/1.1\r\n\r\n"), 5)
            writer.close()
            for _, w in stuck:
                w.close()
            return status

    assert b" 200 " in asyncio.run(go())

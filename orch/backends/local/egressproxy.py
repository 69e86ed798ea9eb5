"""A local strict worker's way to the network, when its run allows any (`orch up --local --egress allowlist`).

The worker's sandbox has no network (orch.backends.local.bwrap); the relay (orch.backends.local.relay) serves it an HTTP
CONNECT proxy on a socket of its own, `egress.sock`, beside its gateway socket, and the worker's portal
(orch.backends.local.portal) listens for it on PROXY_PORT of the sandbox's loopback, where HTTPS_PROXY and the rest
point (`proxy_env`). For each CONNECT the relay, on the host:

- takes only a host name on the run's allowlist (orch.allowlist: the name exactly, the port exactly, 443
  when an entry names none): an IP literal or a name not listed is refused;
- resolves the name itself, and refuses it when any address it resolves to is not a global one (loopback,
  private, link-local...): a listed name pointed at the host's own services or the LAN reaches nothing;
- connects to the address it checked (never resolving again), answers `200` and copies bytes both ways.

Only CONNECT: the traffic is TLS end to end (pip, npm, git over HTTPS); a plain-HTTP request is refused.
Each refusal answers `403` (`405` for plain HTTP) with the reason and is a controller event (`egress-refused`),
rate-limited per worker and reason (orch.run.refusals); a listed name that does not resolve or answer is a
`502`, no event. An agent's own chatter to its vendor (an update check) is refused like any other name.
A worker's open tunnels are capped like its gateway connections, and its lookups run on threads of its own.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol
from urllib.parse import urlsplit

from orch.allowlist import allows, is_ip, public
from orch.backends.local.splice import splice
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import LocalRunInfo, RunInfo
from orch.run.refusals import RefusalLog

SOCKET = "egress.sock"
"""The proxy's socket in a worker's folder of sockets, beside its gateway socket."""
PROXY_PORT = 3128
"""Where the worker's portal listens for its proxy, in the sandbox's own loopback (3129 if the gateway's is)."""
EGRESS_CONNECTIONS = 32  # open tunnels per worker: a package manager's pool holds a few
HEAD_LIMIT = 8192  # a CONNECT request's head
HEAD_TIMEOUT = 10.0  # a client that sends no whole head in this long is dropped
DIAL_TIMEOUT = 15.0  # resolving and connecting, each
LOOKUP_THREADS = 2  # a worker's lookups at once (each proxy its own threads)

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
Lookup = Callable[[str, int], list[str]]
Connect = Callable[[str, int], Awaitable[Streams]]


def allowlist_of(info: RunInfo) -> list[str] | None:
    """The run's local egress allowlist (`host:port` entries), None when its workers have no network."""
    return info.egress_allow if isinstance(info, LocalRunInfo) else None


def proxy_port(gateway_port: int | None) -> int:
    return PROXY_PORT + 1 if gateway_port == PROXY_PORT else PROXY_PORT


def proxy_env(port: int) -> dict[str, str]:
    """The worker's proxy variables (both spellings: tools read one or the other); the gateway's loopback
    goes direct, never through the proxy."""
    url = f"http://127.0.0.1:{port}"
    names = ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"]
    env = {name: url for name in [*names, *(n.lower() for n in names)]}
    return {**env, "NO_PROXY": "127.0.0.1,localhost,::1", "no_proxy": "127.0.0.1,localhost,::1"}


def system_lookup(host: str, port: int) -> list[str]:
    """The host's resolver: every address of `host` (blocking: run on the worker's own threads)."""
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(sockaddr[0]) for *_, sockaddr in found))


async def tcp_connect(address: str, port: int) -> Streams:
    return await asyncio.open_connection(address, port)


class Refused(Exception):
    """A CONNECT refused: `status` and the reason (the event's and the worker's answer)."""

    def __init__(self, status: int, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.reason = status, reason


class Admits(Protocol):
    """What the proxy needs of a cap on open connections (orch.backends.local.connections)."""

    def admit(self) -> bool: ...

    def release(self) -> None: ...


class EgressProxy:
    """Worker n's CONNECT proxy over `allowlist`. `lookup` and `connect`: the host's resolver and TCP (a test
    gives its own, to reach a server of its own through a name it controls). Its lookups run on threads of
    its own, LOOKUP_THREADS: a worker whose lookups hang (a listed name's slow DNS) waits for itself, while
    every other worker's run on theirs (the loop's shared pool would let one worker take every thread)."""

    def __init__(
        self,
        run: RunFolder,
        n: int,
        allowlist: list[str],
        cap: Admits,
        lookup: Lookup = system_lookup,
        connect: Connect = tcp_connect,
    ) -> None:
        self.run, self.n, self.allowlist, self.cap = run, n, list(allowlist), cap
        self.lookup, self.connect = lookup, connect
        self._refusals = RefusalLog(run)
        self.pool = ThreadPoolExecutor(max_workers=LOOKUP_THREADS, thread_name_prefix=f"egress-{n}")

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.cap.admit():
            await self._answer(writer, 503, "too many open connections")
            return
        try:
            try:
                upstream = await self._open(reader)
            except Refused as refused:
                if refused.status == 502:  # a listed name that did not resolve or answer: no policy refused it
                    await self._answer(writer, refused.status, f"{refused.reason}: {refused}")
                    return
                self._refusals.refuse(
                    (self.n, refused.reason),
                    Event.EGRESS_REFUSED,
                    self.n,
                    {"reason": refused.reason, "target": str(refused)[:200]},
                )
                await self._answer(writer, refused.status, f"{refused.reason}: {refused}")
                return
            except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                writer.close()
                return
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await splice(_given(upstream), reader, writer)
        finally:
            self.cap.release()

    async def _open(self, reader: asyncio.StreamReader) -> Streams:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
        method, _, rest = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
        target = rest.rpartition(" ")[0] if " " in rest else rest
        if method.upper() != "CONNECT":
            raise Refused(405, "not-connect", f"{method} {target}: only CONNECT (HTTPS) goes out")
        parts = urlsplit(f"//{target}")
        host, port = parts.hostname or "", parts.port
        if not host or port is None or parts.netloc != target or "@" in target:  # host:port, nothing more
            raise Refused(400, "bad-target", target)
        if is_ip(host):
            raise Refused(403, "ip-literal", f"{target}: name a listed host, not an address")
        if not allows(self.allowlist, host, port):
            raise Refused(403, "not-listed", f"{host}:{port} is not on the run's egress allowlist")
        try:
            looked = asyncio.get_running_loop().run_in_executor(self.pool, self.lookup, host, port)
            addresses = await asyncio.wait_for(looked, DIAL_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            raise Refused(502, "unresolved", f"{host}: {exc}") from None
        private = [a for a in addresses if not public(a)]
        if private or not addresses:
            raise Refused(403, "private-address", f"{host} resolves to {', '.join(private) or 'nothing'}")
        last: Exception | None = None
        for address in addresses:
            try:
                return await asyncio.wait_for(self.connect(address, port), DIAL_TIMEOUT)
            except (OSError, TimeoutError) as exc:
                last = exc
        raise Refused(502, "unreachable", f"{host}:{port}: {last}")

    @staticmethod
    async def _answer(writer: asyncio.StreamWriter, status: int, text: str) -> None:
        words = {400: "Bad Request", 403: "Forbidden", 405: "Method Not Allowed", 502: "Bad Gateway"}
        body = f"orch egress: {text}\n".encode()
        writer.write(
            f"HTTP/1.1 {status} {words.get(status, 'Service Unavailable')}\r\nContent-Length: {len(body)}\r\n"
            "Content-Type: text/plain\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        try:
            await asyncio.wait_for(writer.drain(), HEAD_TIMEOUT)
        except (OSError, TimeoutError):
            pass
        finally:
            writer.close()


async def _given(streams: Streams) -> Streams:
    return streams

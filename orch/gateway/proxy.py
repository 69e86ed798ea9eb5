"""A worker's request: check the body, forward it upstream with the user's credential, stream the answer
back chunk by chunk as it arrives, and tee the stream for accounting without delaying a byte."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from orch.gateway.events import EventLog
from orch.gateway.protocol import ApiProtocol, ErrorKind, Outcome
from orch.gateway.records import GatewayBoot, GatewayBudget, GatewayEventKind
from orch.gateway.sse import SseParser
from orch.run.folder import RunFolder

log = logging.getLogger("orch.gateway")
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
# The client session decompresses: the worker gets plain bytes, so these no longer describe them.
_DROP_RESPONSE = HOP_BY_HOP | {"content-encoding"}
NO_RETRY = {"x-should-retry": "false"}


class Proxy:
    def __init__(
        self,
        boot: GatewayBoot,
        protocol: ApiProtocol,
        upstream_url: str,
        events: EventLog,
        folder: RunFolder,
        jobs: dict[int, str],
    ) -> None:
        self.boot, self.protocol, self.events, self.folder, self.jobs = boot, protocol, events, folder, jobs
        self.upstream_url = upstream_url.rstrip("/")
        self._session: aiohttp.ClientSession | None = None
        self.budget = GatewayBudget()

    async def open(self) -> None:
        # No total timeout: a long generation streams for minutes. Reads stall-check instead.
        timeout = aiohttp.ClientTimeout(total=None, connect=30, sock_read=600)
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        self._session = aiohttp.ClientSession(timeout=timeout, connector=connector, auto_decompress=True)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def set_budget(self, budget: GatewayBudget) -> None:
        self.budget = budget

    def error(self, status: int, kind: ErrorKind, message: str) -> web.Response:
        return web.json_response(self.protocol.error_body(kind, message), status=status, headers=NO_RETRY)

    async def serve(self, request: web.Request, worker: int, path: str, query: str) -> web.StreamResponse:
        raw = await request.read()
        method = request.method
        body: dict[str, Any] = {}
        if self.protocol.billable(method, path):
            try:
                parsed = json.loads(raw)
                if not isinstance(parsed, dict):
                    raise ValueError("not a JSON object")
            except ValueError as exc:
                self.events.emit(GatewayEventKind.MALFORMED_REQUEST, worker, path=path, error=str(exc)[:200])
                return self.error(400, "invalid_request", f"orch gateway: malformed request body: {str(exc)[:200]}")
            body = parsed
        return await self.forward(request, worker, method, path + query, raw, body)

    def _upstream_headers(self, request: web.Request) -> CIMultiDict[str]:
        lowered = {k.lower(): v for k, v in request.headers.items()}
        headers = CIMultiDict(
            (k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP | self.protocol.auth_headers
        )
        upstream = self.boot.upstream
        if upstream is not None:
            for name, value in self.protocol.upstream_auth(
                upstream.scheme, upstream.secret.get_secret_value(), lowered
            ).items():
                headers[name] = value
        return headers

    async def forward(
        self, request: web.Request, worker: int, method: str, target: str, raw: bytes, body: dict[str, Any]
    ) -> web.StreamResponse:
        assert self._session is not None
        started = time.time()
        try:
            upstream = await self._session.request(
                method,
                self.upstream_url + target,
                data=raw,
                headers=self._upstream_headers(request),
                allow_redirects=False,
            )
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return self._upstream_failed(worker, target, f"unreachable: {type(exc).__name__}: {exc}")
        async with upstream:
            headers = CIMultiDict((k, v) for k, v in upstream.headers.items() if k.lower() not in _DROP_RESPONSE)
            if upstream.content_type == "text/event-stream":
                return await self._stream(request, worker, upstream, headers)
            try:
                data = await upstream.read()
            except (TimeoutError, aiohttp.ClientError) as exc:
                return self._upstream_failed(worker, target, f"cut the response: {type(exc).__name__}: {exc}")
        log.debug(
            "worker %s %s %s -> %s in %.3fs", worker, method, target[:100], upstream.status, time.time() - started
        )
        return web.Response(status=upstream.status, body=data, headers=headers)

    async def _stream(
        self, request: web.Request, worker: int, upstream: aiohttp.ClientResponse, headers: CIMultiDict[str]
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=upstream.status, headers=headers)
        await response.prepare(request)
        parser, reader = SseParser(), self.protocol.stream_reader()
        try:
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)  # first: the tee must not delay the worker's bytes
                for event in parser.feed(chunk):
                    reader.feed(event)
        except (TimeoutError, aiohttp.ClientError) as exc:
            self.events.emit(GatewayEventKind.UPSTREAM_ERROR, worker, error=f"stream cut: {type(exc).__name__}")
        outcome: Outcome = reader.outcome()
        log.debug("worker %s stream done complete=%s", worker, outcome.complete)
        await response.write_eof()
        return response

    def _upstream_failed(self, worker: int, target: str, why: str) -> web.Response:
        self.events.emit(GatewayEventKind.UPSTREAM_ERROR, worker, path=target[:200], error=why[:300])
        return self.error(502, "upstream", f"orch gateway: upstream {why}"[:500])

"""A worker's request: check the body and the budget, forward it upstream with the user's credential (or
answer from the replay cassette), stream the answer back chunk by chunk as it arrives, tee the stream for
accounting without delaying a byte, then count, ledger and record the completed exchange.

What Claude Code 2.1.332 does with the gateway's own refusals (tests/gateway/test_claude.py, `claude -p`):
- budget exceeded, 400 invalid_request_error + x-should-retry: false: it sends the refused main turn 6
  times within about a second (no backoff), then stops cleanly: exit 1, result `API Error: 400 orch
  gateway: budget exceeded: ...`, is_error, api_error_status 400. No retry loop of minutes.
- unknown token, 401 authentication_error: one request, then exit 1 with `Failed to authenticate. API
  Error: 401 orch gateway: unknown worker token`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from orch.gateway.books import Books
from orch.gateway.events import EventLog
from orch.gateway.ledger import Ledger
from orch.gateway.protocol import ApiProtocol, ErrorKind, Outcome
from orch.gateway.recorder import Recorder
from orch.gateway.records import Exchange, ExchangeKey, GatewayBoot, GatewayEventKind
from orch.gateway.replay import Replayer, ReplayMiss, exchange_key
from orch.gateway.sse import SseParser, split_events

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
KEPT_HEADERS = ("content-type", "retry-after", "x-should-retry", "request-id")
"""The response headers a recording keeps (replay sends them back)."""
NO_RETRY = {"x-should-retry": "false"}
RATE_LIMITS = (429, 529)
DEFAULT_RETRY_AFTER = 30.0


def retry_after(value: str | None) -> float:
    try:
        return max(0.0, float(value)) if value else DEFAULT_RETRY_AFTER
    except ValueError:
        return DEFAULT_RETRY_AFTER  # an HTTP date: rare from the API, not worth parsing


@dataclass
class Call:
    """One worker request on its way through."""

    worker: int
    method: str
    path: str
    """Without the /t/<token> prefix; the query string included."""
    kind: str
    body: dict[str, Any]
    key: ExchangeKey
    seq: int
    job: str | None
    protocol: ApiProtocol
    """The model API this request speaks (Proxy.protocol_for: by its path)."""
    started: float = field(default_factory=time.time)


class Proxy:
    def __init__(self, boot: GatewayBoot, protocol: ApiProtocol, upstream_url: str, events: EventLog,
                 books: Books, ledger: Ledger, recorder: Recorder, jobs: dict[int, str],
                 replayer: Replayer | None, others: Sequence[ApiProtocol] = ()) -> None:  # fmt: skip
        self.boot, self.protocol, self.events = boot, protocol, events
        self.others = tuple(others)
        """Further APIs the run's agents may speak, each claiming the paths its `kind` knows."""
        self.books, self.ledger, self.recorder, self.jobs, self.replayer = books, ledger, recorder, jobs, replayer
        self.upstream_url = upstream_url.rstrip("/")
        self._session: aiohttp.ClientSession | None = None
        self._seq = itertools.count(1)

    async def open(self) -> None:
        if self.replayer is not None:
            return  # replay: no upstream at all
        # No total timeout: a long generation streams for minutes. A stalled read fails instead.
        timeout = aiohttp.ClientTimeout(total=None, connect=30, sock_read=600)
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        self._session = aiohttp.ClientSession(timeout=timeout, connector=connector, auto_decompress=True)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def protocol_for(self, method: str, path: str) -> ApiProtocol:
        """The API whose calls these are: the first of `others` that knows the path, else the default."""
        return next((p for p in self.others if p.kind(method, path) != "other"), self.protocol)

    def error(self, status: int, kind: ErrorKind, message: str, protocol: ApiProtocol | None = None) -> web.Response:
        body = (protocol or self.protocol).error_body(kind, message)
        return web.json_response(body, status=status, headers=NO_RETRY)

    # --- the request ----------------------------------------------------------------------------
    async def serve(self, request: web.Request, worker: int, path: str, query: str) -> web.StreamResponse:
        raw = await request.read()
        method = request.method
        protocol = self.protocol_for(method, path)
        kind = protocol.kind(method, path)
        body: dict[str, Any] = {}
        if protocol.billable(method, path):
            try:
                parsed = json.loads(raw)
                if not isinstance(parsed, dict):
                    raise ValueError("not a JSON object")
            except ValueError as exc:
                why = str(exc)[:200]
                self.events.emit(GatewayEventKind.MALFORMED_REQUEST, worker, path=path, error=why)
                return self.error(400, "invalid_request", f"orch gateway: malformed request body: {why}", protocol)
            body = parsed
        key = exchange_key(path + query, body, self.boot.run_dir, self.boot.workdir)
        call = Call(worker, method, path + query, kind, body, key, next(self._seq), self.jobs.get(worker), protocol)
        if kind == "messages" and (reason := self.books.refusal(worker)):
            # Each refusal (the event is once); what kind of call, to see what the agent retries.
            log.info("refused worker %s: %s (%s, turn %s)", worker, reason, call.key.kind, call.key.turn)
            await self.books.flush()
            return self.error(400, "invalid_request", f"orch gateway: budget exceeded: {reason}", protocol)
        if self.replayer is not None:
            return await self.replay(request, call)
        return await self.forward(request, call, raw)

    def _upstream_headers(self, request: web.Request, protocol: ApiProtocol) -> CIMultiDict[str]:
        lowered = {k.lower(): v for k, v in request.headers.items()}
        headers = CIMultiDict(
            (k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP | protocol.auth_headers
        )
        upstream = self.boot.upstream
        if upstream is not None:
            secret = upstream.secret.get_secret_value()
            for name, value in protocol.upstream_auth(upstream.scheme, secret, lowered).items():
                headers[name] = value
        return headers

    async def forward(self, request: web.Request, call: Call, raw: bytes) -> web.StreamResponse:
        assert self._session is not None
        try:
            upstream = await self._session.request(
                call.method,
                self.upstream_url + call.path,
                data=raw,
                headers=self._upstream_headers(request, call.protocol),
                allow_redirects=False,
            )
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return self._upstream_failed(call, f"unreachable: {type(exc).__name__}: {exc}")
        async with upstream:
            headers = CIMultiDict((k, v) for k, v in upstream.headers.items() if k.lower() not in _DROP_RESPONSE)
            if upstream.status in RATE_LIMITS:
                await self._rate_limited(call, upstream.status, upstream.headers.get("retry-after"))
            if upstream.content_type == "text/event-stream":
                return await self._stream(request, call, upstream.status, headers, upstream)
            try:
                data = await upstream.read()
            except (TimeoutError, aiohttp.ClientError) as exc:
                return self._upstream_failed(call, f"cut the response: {type(exc).__name__}: {exc}")
        outcome = Outcome()
        if upstream.status == 200 and call.kind != "other":
            try:
                parsed = json.loads(data)
                if not isinstance(parsed, dict):
                    raise ValueError("not a JSON object")
            except ValueError:
                return self._upstream_failed(call, f"sent garbage: {data[:80]!r}")
            outcome = call.protocol.response_outcome(parsed)
        await self._finish(call, upstream.status, headers, False, data.decode(errors="replace"), outcome)
        return web.Response(status=upstream.status, body=data, headers=headers)

    async def _stream(
        self,
        request: web.Request,
        call: Call,
        status: int,
        headers: CIMultiDict[str],
        upstream: aiohttp.ClientResponse,
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=status, headers=headers)
        await response.prepare(request)
        parser, reader, chunks = SseParser(), call.protocol.stream_reader(), []
        try:
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)  # first: the tee must not delay the worker's bytes
                chunks.append(chunk)
                for event in parser.feed(chunk):
                    reader.feed(event)
        except (TimeoutError, aiohttp.ClientError) as exc:
            self.events.emit(
                GatewayEventKind.UPSTREAM_ERROR, call.worker, path=call.path[:200], error=f"stream cut: {exc!r}"[:300]
            )
        await self._finish(call, status, headers, True, b"".join(chunks).decode(errors="replace"), reader.outcome())
        await response.write_eof()
        return response

    # --- replay ---------------------------------------------------------------------------------
    async def replay(self, request: web.Request, call: Call) -> web.StreamResponse:
        assert self.replayer is not None
        answer = self.replayer.answer(call.worker, call.method, call.path, call.body)
        if isinstance(answer, ReplayMiss):
            self.events.emit(
                GatewayEventKind.REPLAY_MISS, call.worker, turn=answer.turn, difference=answer.message[:1000]
            )
            return self.error(400, "invalid_request", f"orch gateway: replay: {answer.message}", call.protocol)
        headers = CIMultiDict(answer.headers)
        if not answer.stream:
            outcome = Outcome()
            if answer.status == 200 and call.kind != "other":
                with contextlib.suppress(ValueError, AttributeError):
                    outcome = call.protocol.response_outcome(json.loads(answer.body))
            await self._finish(call, answer.status, headers, False, answer.body, outcome)
            return web.Response(status=answer.status, text=answer.body, headers=headers)
        response = web.StreamResponse(status=answer.status, headers=headers)
        await response.prepare(request)
        parser, reader = SseParser(), call.protocol.stream_reader()
        for event in split_events(answer.body):
            data = event.encode()
            await response.write(data)
            for parsed in parser.feed(data):
                reader.feed(parsed)
        await self._finish(call, answer.status, headers, True, answer.body, reader.outcome())
        await response.write_eof()
        return response

    # --- after the exchange ---------------------------------------------------------------------
    async def _rate_limited(self, call: Call, status: int, header: str | None) -> None:
        wait = retry_after(header)
        self.books.rate_limited(call.worker, time.time() + wait)
        self.events.emit(GatewayEventKind.RATE_LIMITED, call.worker, status=status, retry_after=wait)
        await self.books.flush()

    async def _finish(
        self, call: Call, status: int, headers: CIMultiDict[str], stream: bool, text: str, outcome: Outcome
    ) -> None:
        """Count, ledger and record a completed exchange; a stream cut short is none of these."""
        if stream and not outcome.complete:
            return
        if call.kind == "messages" and status == 200:
            model = outcome.model or call.protocol.model(call.body) or "unknown"
            if outcome.usage is not None:
                self.books.count(call.worker, call.job, model, outcome.usage)
            self.ledger.record(
                call.worker, call.job, call.seq, outcome.tool_uses, call.protocol.tool_results(call.body)
            )
            await self.books.flush()
        exchange = Exchange(
            seq=call.seq,
            ts=call.started,
            worker=call.worker,
            job=call.job,
            method=call.method,
            path=call.path,
            request=call.body,
            status=status,
            headers={k: headers[k] for k in KEPT_HEADERS if k in headers},
            stream=stream,
            body=text,
            key=call.key,
        )
        await asyncio.to_thread(self.recorder.append, exchange)

    def _upstream_failed(self, call: Call, why: str) -> web.Response:
        self.events.emit(GatewayEventKind.UPSTREAM_ERROR, call.worker, path=call.path[:200], error=why[:300])
        return self.error(502, "upstream", f"orch gateway: upstream {why}"[:500], call.protocol)

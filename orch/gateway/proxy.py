"""A worker's request: check the body and the budget, forward it upstream with the user's credential (or
answer from the replay cassette), stream the answer back chunk by chunk as it arrives, tee the stream for
accounting without delaying a byte, then count, ledger and record the completed exchange.

What the pinned Claude Code does with the gateway's own refusals (tests/scenarios/test_claude_gateway.py, `claude -p`):
- budget exceeded, 400 invalid_request_error + x-should-retry: false: it sends the refused main turn 6
  times within about a second (no backoff), then stops cleanly: exit 1, result `API Error: 400 orch
  gateway: budget exceeded: ...`, is_error, api_error_status 400. No retry loop of minutes.
- unknown token, 401 authentication_error: one request, then exit 1 with `Failed to authenticate. API
  Error: 401 orch gateway: unknown worker token`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import posixpath
import time
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from orch.gateway.apis import registry as protocols
from orch.gateway.apis.base import ApiProtocol, ErrorKind, Outcome
from orch.gateway.apis.registry import claiming
from orch.gateway.books import Books
from orch.gateway.eventlog import EventLog
from orch.gateway.modeldir import GatewayBoot, GatewayEventKind, Upstream
from orch.gateway.recording.keys import exchange_key
from orch.gateway.recording.replay import Replayer, ReplayMiss
from orch.gateway.writer import Call, Done, Writer
from orch.sse import SseParser, split_events

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


def canonical(path: str) -> bool:
    """A path as an API client sends it: no dot segments, empty segments or percent-escapes, which an
    upstream would resolve to an endpoint the gateway's protocols did not see."""
    return "%" not in path and "//" not in path and posixpath.normpath(path) == path


def retry_after(value: str | None) -> float | None:
    """The header's seconds; None when absent or not a number (an HTTP date: rare from the API)."""
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


class Proxy:
    def __init__(self, boot: GatewayBoot, upstream_urls: list[str], events: EventLog,
                 books: Books, writer: Writer, jobs: dict[int, str], replayer: Replayer | None) -> None:  # fmt: skip
        self.boot, self.events = boot, events
        self.books, self.writer, self.jobs, self.replayer = books, writer, jobs, replayer
        self.upstreams = [(u, url.rstrip("/")) for u, url in zip(boot.upstreams, upstream_urls, strict=True)]
        self._session: aiohttp.ClientSession | None = None
        self._seq = itertools.count(1)

    async def open(self) -> None:
        if self.replayer is not None:
            return  # replay: no upstream at all
        # No total timeout: a long generation streams for minutes. A stalled read fails instead.
        timeout = aiohttp.ClientTimeout(total=None, connect=30, sock_read=self.boot.upstream_stall)
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        self._session = aiohttp.ClientSession(timeout=timeout, connector=connector, auto_decompress=True)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def error(self, status: int, kind: ErrorKind, message: str, protocol: ApiProtocol | None = None) -> web.Response:
        body = (protocol or protocols.DEFAULT).error_body(kind, message)
        return web.json_response(body, status=status, headers=NO_RETRY)

    def route(self, agent: str | None, claimed: ApiProtocol | None) -> tuple[Upstream, str] | None:
        """The upstream (and its URL) of a worker of kind `agent` for a call of protocol `claimed` (None:
        a path no protocol claims): the first that serves both; None when none does. Each upstream's
        credential only ever goes to its own URL."""
        name = claimed.name if claimed is not None else None
        return next(((u, url) for u, url in self.upstreams if u.serves(agent, name)), None)

    # --- the request ----------------------------------------------------------------------------
    async def serve(
        self, request: web.Request, worker: int, agent: str | None, path: str, query: str
    ) -> web.StreamResponse:
        raw = await request.read()
        method = request.method
        claimed = claiming(path)
        protocol = claimed or protocols.DEFAULT
        if not canonical(path):
            # `/x/../responses`, `//responses` or `/%72esponses` would reach the upstream's endpoint
            # while the gateway counted, capped and ledgered nothing: refused.
            self.events.emit(GatewayEventKind.MALFORMED_REQUEST, worker, path=path[:200], error="non-canonical path")
            return self.error(400, "invalid_request", "orch gateway: the request path is not canonical", protocol)
        target: tuple[Upstream, str] | None = None
        if self.replayer is None:
            target = self.route(agent, claimed)
            if target is None:
                # Another model API's call (a Claude Code worker posting to /responses, say): its credential
                # is another upstream's, and this worker's upstream does not speak it. Never forwarded.
                what = f"the {claimed.name} API" if claimed is not None else path[:100]
                self.events.emit(
                    GatewayEventKind.NO_UPSTREAM,
                    worker,
                    path=path[:200],
                    agent=agent,
                    protocol=getattr(claimed, "name", None),
                )
                message = f"orch gateway: no upstream of this run serves {what} for a {agent or 'unbound'} worker"
                return self.error(403, "permission", message, protocol)
            if claimed is None and target[0].protocols:  # a path nobody claims: its upstream's headers
                protocol = protocols.named(target[0].protocols[0])
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
        call = Call(worker, method, path + query, kind, body, next(self._seq), self.jobs.get(worker), protocol)
        if kind == "messages" and (reason := self.books.refusal(worker)):
            # Each refusal (the event is once); what kind of call, to see what the agent retries.
            key = exchange_key(call.path, body, self.boot.run_dir, self.boot.workdir)
            log.info("refused worker %s: %s (%s, turn %s)", worker, reason, key.kind, key.turn)
            await self.books.flush()
            return self.error(400, "invalid_request", f"orch gateway: budget exceeded: {reason}", protocol)
        if self.replayer is not None:
            return await self.replay(request, call)
        assert target is not None
        return await self.forward(request, call, raw, *target)

    @staticmethod
    def _upstream_headers(request: web.Request, protocol: ApiProtocol, upstream: Upstream) -> CIMultiDict[str]:
        lowered = {k.lower(): v for k, v in request.headers.items()}
        # Every header any protocol reads a credential from is dropped, not only this one's.
        drop = HOP_BY_HOP.union(*(p.auth_headers for p in protocols.PROTOCOLS))
        headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in drop)
        secret = upstream.secret.get_secret_value()
        for name, value in protocol.upstream_auth(upstream.scheme, secret, lowered).items():
            headers[name] = value
        return headers

    async def forward(
        self, request: web.Request, call: Call, raw: bytes, target: Upstream, url: str
    ) -> web.StreamResponse:
        assert self._session is not None
        try:
            upstream = await self._session.request(
                call.method,
                url + call.path,
                data=call.protocol.upstream_body(call.body, raw) if call.body else raw,
                headers=self._upstream_headers(request, call.protocol, target),
                allow_redirects=False,
            )
        except TimeoutError:
            return self._upstream_failed(call, f"stalled: no answer within {self.boot.upstream_stall:g}s")
        except (aiohttp.ClientError, OSError) as exc:
            return self._upstream_failed(call, f"unreachable: {type(exc).__name__}: {exc}")
        async with upstream:
            headers = CIMultiDict((k, v) for k, v in upstream.headers.items() if k.lower() not in _DROP_RESPONSE)
            given = upstream.headers.get("retry-after")
            if upstream.status in RATE_LIMITS or (upstream.status >= 500 and given):
                await self._rate_limited(call, upstream.status, given)
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
        self._finish(call, upstream.status, headers, False, data, outcome)
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
        parser, reader, chunks = SseParser(), call.protocol.stream_reader(call.body), []
        try:
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)  # first: the tee must not delay the worker's bytes
                chunks.append(chunk)
                for event in parser.feed(chunk):
                    reader.feed(event)
        except (TimeoutError, aiohttp.ClientError) as exc:
            why = "stalled" if isinstance(exc, TimeoutError) else "cut"
            self.events.emit(
                GatewayEventKind.UPSTREAM_ERROR, call.worker, path=call.path[:200], error=f"stream {why}: {exc!r}"[:300]
            )
        else:
            if status == 200 and call.kind == "messages" and not reader.outcome().complete:
                # Garbage, or an answer without its end: passed on as it came, never counted.
                error = "stream ended without its end event"
                self.events.emit(GatewayEventKind.UPSTREAM_ERROR, call.worker, path=call.path[:200], error=error)
        # Counted before the end (a settle that follows the answer finds it submitted); the writer's files
        # are written after the handler yields, off the worker's path.
        self._finish(call, status, headers, True, b"".join(chunks), reader.outcome())
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
            self._finish(call, answer.status, headers, False, answer.body, outcome)
            return web.Response(status=answer.status, text=answer.body, headers=headers)
        response = web.StreamResponse(status=answer.status, headers=headers)
        await response.prepare(request)
        parser, reader = SseParser(), call.protocol.stream_reader(call.body)
        for event in split_events(answer.body):
            data = event.encode()
            await response.write(data)
            for parsed in parser.feed(data):
                reader.feed(parsed)
        self._finish(call, answer.status, headers, True, answer.body, reader.outcome())
        await response.write_eof()
        return response

    # --- after the exchange ---------------------------------------------------------------------
    async def _rate_limited(self, call: Call, status: int, header: str | None) -> None:
        given = retry_after(header)
        wait = DEFAULT_RETRY_AFTER if given is None else given
        self.books.rate_limited(call.worker, time.time() + wait, given)
        self.events.emit(GatewayEventKind.RATE_LIMITED, call.worker, status=status, retry_after=wait)
        await self.books.flush()

    def _finish(
        self, call: Call, status: int, headers: CIMultiDict[str], stream: bool, text: str | bytes, outcome: Outcome
    ) -> None:
        """Count a completed exchange now (the next request meets an exact budget) and hand its ledger lines,
        recording and usage.json to the writer; a stream cut short is none of these."""
        if stream and not outcome.complete:
            return
        tool_uses = None
        if call.kind == "messages" and status == 200:
            model = outcome.model or call.protocol.model(call.body) or "unknown"
            if outcome.usage is not None:
                self.books.count(call.worker, call.job, model, outcome.usage)
            tool_uses = outcome.tool_uses
        kept = {k: headers[k] for k in KEPT_HEADERS if k in headers}
        self.writer.submit(Done(call, status, kept, stream, text, tool_uses))

    def _upstream_failed(self, call: Call, why: str) -> web.Response:
        self.events.emit(GatewayEventKind.UPSTREAM_ERROR, call.worker, path=call.path[:200], error=why[:300])
        return self.error(502, "upstream", f"orch gateway: upstream {why}"[:500], call.protocol)

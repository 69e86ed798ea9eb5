"""The scripted model's HTTP server (aiohttp, like the gateway): every model API orch's agents speak,
driving the real agent binaries without credentials. Each POST goes to the API class that claims its path
(orch/offline/apis/registry.py: Anthropic Messages, OpenAI Responses, OpenAI Chat Completions, Gemini).

Tests, the offline demo and dry runs point workers at it (`ANTHROPIC_BASE_URL=http://127.0.0.1:PORT`,
any dummy `ANTHROPIC_API_KEY`); a run's gateway starts it as its offline upstream. The model is
stateless: every answer is derived from the request's message history, so retries, restarts and
parallel workers need no bookkeeping here. The script format, and how the next answer follows from the
messages: orch.offline.script (pure). This module is the HTTP side: routing, the request log, errors.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import hashlib
import json
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from aiohttp import web

from orch.offline.apis import anthropic
from orch.offline.apis import registry as apis
from orch.offline.apis.base import Reply, json_reply

log = logging.getLogger(__name__)
MAX_BODY = 512 * 1024 * 1024
"""As the gateway's: agents send whole conversations, images included."""
SHUTDOWN_TIMEOUT = 2.0
"""Seconds `stop` gives a request in flight (every answer is computed at once: none needs long)."""


@dataclass(frozen=True)
class RequestRecord:
    """One request as seen by the server (headers are never kept: they carry the API key)."""

    path: str
    model: str | None
    stream: bool
    prompt: str | None
    step: str
    """What was answered: "Bash" / "Write" / "Read", "reply", "done", "ok", "fail:KIND", "side",
    "count_tokens", "not_found", "bad_request", "script-error", "brief-error"."""
    auth: str = "none"
    """Which credential came, never its value: "api-key" (x-api-key, or Gemini's x-goog-api-key), "bearer"
    (Authorization), "none"."""
    key_digest: str = ""
    """sha256 of the credential that came (12 hex), so a test can tell whose it was without keeping it."""


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def _credential(request: web.BaseRequest) -> tuple[str, str]:
    """(which kind of credential came, its digest)."""
    api_key = request.headers.get("x-api-key") or request.headers.get("x-goog-api-key") or ""
    key, auth = api_key, "api-key" if api_key else "none"
    bearer = request.headers.get("Authorization") or ""
    if bearer.lower().startswith("bearer "):
        key, auth = bearer[7:], "bearer"
    return auth, key_digest(key) if key else ""


Observer = Callable[[RequestRecord, Mapping[str, str], Mapping[str, Any]], None]
"""Called with each logged request, its headers and its body (the benchmarks' recorder: bench/recorder.py)."""


class _App:
    """The handlers and the request log (read from other threads: under a lock)."""

    def __init__(self, observer: Observer | None) -> None:
        self.lock = threading.Lock()
        self.log: list[RequestRecord] = []
        self.observer = observer

    def _send(self, request: web.BaseRequest, reply: Reply, body: Mapping[str, Any]) -> web.Response:
        auth, digest = _credential(request)
        record = RequestRecord(request.path, reply.model, reply.stream, reply.prompt, reply.step, auth, digest)
        with self.lock:
            self.log.append(record)
        if self.observer is not None:
            self.observer(record, request.headers, body)
        return web.Response(
            status=reply.status, body=reply.body, content_type=reply.content_type, headers=reply.headers
        )

    def _not_found(self, request: web.BaseRequest) -> web.Response:
        log.warning("scripted model server: no such endpoint %s %s", request.method, request.path_qs[:200])
        payload = anthropic.error("not_found_error", f"no such endpoint: {request.path}")
        return self._send(request, json_reply(404, payload, "not_found"), {})

    async def handle(self, request: web.BaseRequest) -> web.Response:
        if request.method == "POST":
            return await self.post(request)
        if request.method in ("GET", "HEAD"):
            return await self.get(request)
        return web.Response(status=405)

    async def get(self, request: web.BaseRequest) -> web.Response:
        if request.method == "HEAD":  # a liveness probe: not logged
            return web.Response(status=200 if request.path == "/" else 404, content_type="application/json")
        if request.path != "/":
            return self._not_found(request)
        return web.json_response({"status": "ok", "server": "orch scripted model"})

    async def post(self, request: web.BaseRequest) -> web.Response:
        raw = await request.read()  # chunked or by length: aiohttp reads the whole body either way
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body is not a JSON object")
        except ValueError as exc:
            payload = anthropic.error("invalid_request_error", f"bad JSON body: {exc}")
            return self._send(request, json_reply(400, payload, "bad_request"), {})
        api = apis.for_path(request.path)
        if api is None:
            return self._not_found(request)
        return self._send(request, api.answer(request.path, body, raw), body)


class ScriptedModelServer:
    """Serve the scripted model on its own event loop in a daemon thread: `with ScriptedModelServer() as
    srv: srv.url`."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        observer: Observer | None = None,
        sock: socket.socket | None = None,
    ) -> None:
        """`sock`: a listening socket to serve instead of binding host:port (a gateway's supervisor binds it, so
        the URL is known before this process has started)."""
        self.host, self.port = host, port
        self._sock = sock
        self.url = ""
        self._app = _App(observer)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def requests(self) -> list[RequestRecord]:
        """A snapshot of the request log, oldest first."""
        with self._app.lock:
            return list(self._app.log)

    def start(self) -> ScriptedModelServer:
        # Bound here, so a taken port is an error in the caller and the URL is known before serving.
        sock = self._sock or socket.create_server((self.host, self.port))
        self.host, self.port = sock.getsockname()[:2]
        self.url = f"http://{self.host}:{self.port}"
        loop = self._loop = asyncio.new_event_loop()

        async def setup() -> web.ServerRunner:
            # aiohttp's low-level server: one handler, no router (less per-request work than an Application).
            request = functools.partial(web.BaseRequest, loop=loop, client_max_size=MAX_BODY)
            server = web.Server(self._app.handle, request_factory=request, access_log=None)
            runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT)
            await runner.setup()
            await web.SockSite(runner, sock).start()
            return runner

        runner = loop.run_until_complete(setup())

        def serve() -> None:
            asyncio.set_event_loop(loop)
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=serve, name="orch-model", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; `requests` stays readable."""
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=SHUTDOWN_TIMEOUT + 3)
            self._thread = None

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """`python -m orch.offline.modelserver [--host H] [--port P]`: print the URL, serve until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="python -m orch.offline.modelserver", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--url-file", type=Path, help="also write the URL here (atomically) once serving")
    parser.add_argument("--fd", type=int, help="serve this inherited listening socket (not --host/--port)")
    parser.add_argument("--ready-fd", type=int, help="write the URL to this pipe once serving, then close it")
    args = parser.parse_args(argv)
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        sock = None if args.fd is None else socket.socket(fileno=args.fd)
        with ScriptedModelServer(args.host, args.port, sock=sock) as server:
            print(server.url, flush=True)
            if args.ready_fd is not None:  # the gateway's supervisor waits on it (a line, or EOF if this died)
                with open(args.ready_fd, "w") as ready:
                    ready.write(server.url + "\n")
            if args.url_file is not None:  # renamed into place: a waiter never sees a partial URL
                partial = args.url_file.with_name(f".{args.url_file.name}.{os.getpid()}")
                partial.write_text(server.url + "\n")
                partial.replace(args.url_file)
            while not stopping.wait(3600):
                pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


if __name__ == "__main__":
    sys.exit(main())

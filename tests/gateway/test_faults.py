"""Faults on both sides: upstream rate limits pass through, an unreachable or garbled upstream is a 502,
a stream cut short is not counted, a malformed worker body is a 400."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from orch.gateway.records import Upstream
from tests.gateway.gw import boot_for, call, events_of, gateway, main_call, script_prompt, settled, usage_of

Reply = Callable[[BaseHTTPRequestHandler], None]


@contextmanager
def fake_upstream(reply: Reply) -> Iterator[str]:
    """A tiny HTTP upstream answering every POST with `reply` (for what the scripted model never does)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            reply(self)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _api(tmp_path: Path, url: str) -> Any:
    (tmp_path / "run").mkdir(exist_ok=True)
    return gateway(tmp_path, boot_for(tmp_path / "run", Upstream(kind="api", url=url, scheme="x-api-key", secret="k")))


def test_a_scripted_rate_limit_passes_through(tmp_path: Path) -> None:
    with gateway(tmp_path) as gw:
        token = gw.client.mint_token(1)
        reply = call(gw.base(token) + "/v1/messages", main_call(script_prompt({"fail": "rate_limit"})))
        assert reply.status == 429 and reply.json()["error"]["type"] == "rate_limit_error"
        assert reply.headers["x-should-retry"] == "false"  # the upstream's own header, unchanged
        until = usage_of(settled(gw))["workers"]["1"]["rate_limited_until"]
        assert 25 < until - time.time() <= 30  # no retry-after: 30 s
        assert next(e["data"] for e in events_of(gw.folder) if e["event"] == "rate-limited")["status"] == 429


def _overloaded(handler: BaseHTTPRequestHandler) -> None:
    data = json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}).encode()
    handler.send_response(529)
    handler.send_header("content-type", "application/json")
    handler.send_header("retry-after", "7")
    handler.send_header("content-length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def test_retry_after_is_kept_and_recorded(tmp_path: Path) -> None:
    with fake_upstream(_overloaded) as url, _api(tmp_path, url) as gw:
        token = gw.client.mint_token(3)
        reply = call(gw.base(token) + "/v1/messages", main_call())
        assert reply.status == 529 and reply.headers["retry-after"] == "7"
        assert reply.json()["error"]["message"] == "busy"
        until = usage_of(settled(gw))["workers"]["3"]["rate_limited_until"]
        assert 2 < until - time.time() <= 7


def _cut_stream(handler: BaseHTTPRequestHandler) -> None:
    start = {"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 5, "output_tokens": 1}}}
    data = f"event: message_start\ndata: {json.dumps(start)}\n\n".encode()
    handler.send_response(200)
    handler.send_header("content-type", "text/event-stream")
    handler.send_header("content-length", str(len(data) + 1000))  # promises more than it sends
    handler.end_headers()
    handler.wfile.write(data)
    handler.wfile.flush()
    handler.close_connection = True


def test_a_stream_cut_short_is_not_counted(tmp_path: Path) -> None:
    with fake_upstream(_cut_stream) as url, _api(tmp_path, url) as gw:
        token = gw.client.mint_token(1)
        with contextlib.suppress(OSError):  # the worker sees its stream end early, as it would from the API
            call(gw.base(token) + "/v1/messages", main_call())
        assert not settled(gw).model_usage.exists() or usage_of(gw.folder)["total"]["requests"] == 0
        assert not gw.folder.exchanges(1).exists()
        assert any(e["event"] == "upstream-error" for e in events_of(gw.folder))


def test_an_unreachable_upstream_is_502(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, never listening: connection refused
        with _api(tmp_path, f"http://127.0.0.1:{port}") as gw:
            token = gw.client.mint_token(1)
            reply = call(gw.base(token) + "/v1/messages", main_call())
            assert reply.status == 502 and reply.headers["x-should-retry"] == "false"
            error = reply.json()["error"]
            assert error["type"] == "api_error" and error["message"].startswith("orch gateway: upstream unreachable")
            assert [e["worker"] for e in events_of(gw.folder) if e["event"] == "upstream-error"] == [1]


def _garbage(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", "9")
    handler.end_headers()
    handler.wfile.write(b"not json!")


def test_a_garbled_upstream_is_502(tmp_path: Path) -> None:
    with fake_upstream(_garbage) as url, _api(tmp_path, url) as gw:
        token = gw.client.mint_token(1)
        reply = call(gw.base(token) + "/v1/messages", main_call(stream=False))
        assert reply.status == 502 and "upstream sent garbage" in reply.json()["error"]["message"]


def test_a_malformed_body_is_400(tmp_path: Path) -> None:
    with gateway(tmp_path) as gw:
        token = gw.client.mint_token(1)
        for raw in (b"{not json", b"[1, 2]"):
            reply = call(gw.base(token) + "/v1/messages", raw=raw)
            assert reply.status == 400 and reply.json()["error"]["type"] == "invalid_request_error"
            assert reply.json()["error"]["message"].startswith("orch gateway: malformed request body")
        assert len([e for e in events_of(gw.folder) if e["event"] == "malformed-request"]) == 2


def test_a_big_request_goes_through(tmp_path: Path) -> None:
    with gateway(tmp_path) as gw:
        token = gw.client.mint_token(1)
        reply = call(gw.base(token) + "/v1/messages", main_call("x" * 8_000_000))  # 8 MB: over aiohttp's default
        assert reply.status == 200

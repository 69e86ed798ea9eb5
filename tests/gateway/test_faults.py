"""Faults on both sides, each a clear error, an event in model/gateway.jsonl and nothing counted twice or
lost: upstream rate limits pass through; an unreachable, stalled or garbled upstream is a 502; a slow
one streams through while others are served; a stream cut short, stalled or ending in garbage is not
counted; a malformed worker body is a 400; a token of another run is a 401; the server child killed
mid-stream is restarted and the retry is counted once. (Bad tokens and revoked ones: test_process.py;
a cassette missing, corrupt or from another spec: tests/lead/test_replay.py.)"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
import urllib.error
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from orch.gateway.modeldir import Scheme, Upstream
from orch.gateway.recording.exchanges import read_exchanges
from orch.waits import wait_until
from tests.gateway.gw import (
    Running,
    boot_for,
    call,
    events_of,
    gateway,
    health,
    ledger_of,
    main_call,
    script_prompt,
    settled,
    usage_of,
)

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


def _api(tmp_path: Path, url: str, **extra: Any) -> Any:
    (tmp_path / "run").mkdir(exist_ok=True)
    upstream = Upstream(kind="api", url=url, scheme=Scheme.API_KEY, secret=SecretStr("k"))
    return gateway(tmp_path, boot_for(tmp_path / "run", upstream, **extra))


def _sse(*events: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


START = {"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 5, "output_tokens": 1}}}
TOOL = {"type": "tool_use", "id": "toolu_faults1", "name": "Bash", "input": {}}
REST = (
    {"type": "content_block_start", "index": 0, "content_block": TOOL},
    {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "input_json_delta", "partial_json": '{"command": "ls"}'},
    },
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 7}},
    {"type": "message_stop"},
)


def _stream_head(handler: BaseHTTPRequestHandler, length: int) -> None:
    handler.send_response(200)
    handler.send_header("content-type", "text/event-stream")
    handler.send_header("content-length", str(length))
    handler.end_headers()


def _answered(gw: Running, worker: str = "1") -> int:
    """Exchanges counted for the worker (no usage.json yet: none)."""
    folder = settled(gw)
    if not folder.model_usage.exists():
        return 0
    requests: int = usage_of(folder)["workers"].get(worker, {}).get("requests", 0)
    return requests


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


def test_a_slow_upstream_streams_through_while_others_are_served(tmp_path: Path) -> None:
    """An answer that takes its time (here 2 s between two events) is no fault: the worker gets the first
    event at once, another worker is answered meanwhile, and the slow one is counted once when it ends."""
    release = threading.Event()

    def slow_or_quick(handler: BaseHTTPRequestHandler) -> None:
        head, rest = _sse(START), _sse(*REST)
        _stream_head(handler, len(head) + len(rest))
        handler.wfile.write(head)
        handler.wfile.flush()
        if handler.path.endswith("?slow"):
            release.wait(10)
        handler.wfile.write(rest)

    with fake_upstream(slow_or_quick) as url, _api(tmp_path, url) as gw:
        slow, quick = gw.client.mint_token(1), gw.client.mint_token(2)
        seen: dict[str, Any] = {}
        thread = threading.Thread(
            target=lambda: seen.update(reply=call(gw.base(slow) + "/v1/messages?slow", main_call()))
        )
        thread.start()
        assert call(gw.base(quick) + "/v1/messages", main_call()).status == 200  # not behind the slow one
        assert _answered(gw, "2") == 1 and _answered(gw, "1") == 0
        release.set()
        thread.join(20)
        assert seen["reply"].status == 200 and seen["reply"].events()[-1]["type"] == "message_stop"
        assert _answered(gw, "1") == 1
        assert not [e for e in events_of(gw.folder) if e["event"] == "upstream-error"]


def test_a_stalled_upstream_is_cut_with_an_event(tmp_path: Path) -> None:
    """Nothing from the upstream for `upstream_stall` seconds: before its headers a 502, mid-stream a cut
    stream; an upstream-error event each, nothing counted or recorded."""
    release = threading.Event()

    def stall(handler: BaseHTTPRequestHandler) -> None:
        if handler.path.endswith("?before"):
            release.wait(10)
            return
        head = _sse(START)
        _stream_head(handler, len(head) + 1000)
        handler.wfile.write(head)
        handler.wfile.flush()
        release.wait(10)

    try:
        with fake_upstream(stall) as url, _api(tmp_path, url, upstream_stall=0.5) as gw:
            token = gw.client.mint_token(1)
            reply = call(gw.base(token) + "/v1/messages?before", main_call())
            assert reply.status == 502 and reply.headers["x-should-retry"] == "false"
            assert reply.json()["error"]["message"] == "orch gateway: upstream stalled: no answer within 0.5s"
            with contextlib.suppress(OSError):
                call(gw.base(token) + "/v1/messages?mid", main_call())
            errors = [e["data"]["error"] for e in events_of(gw.folder) if e["event"] == "upstream-error"]
            assert errors[0].startswith("stalled") and errors[1].startswith("stream stalled"), errors
            assert _answered(gw) == 0 and not gw.folder.exchanges(1).exists()
    finally:
        release.set()


def test_a_garbage_stream_is_passed_on_but_not_counted(tmp_path: Path) -> None:
    def garbage(handler: BaseHTTPRequestHandler) -> None:
        data = b"data: not json\n\nevent: x\ndata: [1]\n\n" + b"\x00\xff" * 100
        _stream_head(handler, len(data))
        handler.wfile.write(data)

    with fake_upstream(garbage) as url, _api(tmp_path, url) as gw:
        token = gw.client.mint_token(1)
        reply = call(gw.base(token) + "/v1/messages", main_call())
        assert reply.status == 200 and reply.body.startswith(b"data: not json")  # the upstream's own bytes
        errors = [e["data"]["error"] for e in events_of(gw.folder) if e["event"] == "upstream-error"]
        assert errors == ["stream ended without its end event"]
        assert _answered(gw) == 0 and not gw.folder.exchanges(1).exists() and not ledger_of(gw.folder)


def test_a_token_of_another_run_is_refused(tmp_path: Path) -> None:
    """A worker token is good only at its own run's gateway: stolen from one run, it opens nothing in another."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with gateway(tmp_path / "a") as a, gateway(tmp_path / "b") as b:
        stolen = a.client.mint_token(1)
        b.client.mint_token(1)
        reply = call(b.base(stolen) + "/v1/messages", main_call())
        assert reply.status == 401 and reply.json()["error"]["message"] == "orch gateway: unknown worker token"
        assert [e["event"] for e in events_of(b.folder)].count("bad-token") == 1
        assert stolen not in b.folder.model_log.read_text()
        assert not b.folder.model_usage.exists() or _answered(b) == 0
    with pytest.raises((urllib.error.URLError, OSError)):  # its run is over: nothing answers it at all
        call(a.base(stolen) + "/v1/messages", main_call())


def test_the_server_child_killed_mid_stream_is_restarted_and_the_retry_counted_once(tmp_path: Path) -> None:
    """The worker's stream breaks with the child; the supervisor starts another on the same socket with the
    same tokens; the worker's retry is answered and counted once, its tool call ledgered once."""
    first, killed = threading.Event(), threading.Event()
    calls: list[str] = []

    def hang_first(handler: BaseHTTPRequestHandler) -> None:
        calls.append(handler.path)
        head, rest = _sse(START), _sse(*REST)
        _stream_head(handler, len(head) + len(rest))
        handler.wfile.write(head)
        handler.wfile.flush()
        if len(calls) == 1:
            first.set()
            killed.wait(30)  # what follows goes nowhere: its child is gone (a fixed 3 s raced the kill under load)
        with contextlib.suppress(OSError):
            handler.wfile.write(rest)

    with fake_upstream(hang_first) as url, _api(tmp_path, url) as gw:
        token = gw.client.mint_token(1)
        child = health(gw)["pid"]
        cut: dict[str, BaseException] = {}

        def worker() -> None:
            try:
                call(gw.base(token) + "/v1/messages", main_call())
            except OSError as exc:  # http.client's IncompleteRead and resets are OSErrors or wrap one
                cut["error"] = exc
            except Exception as exc:
                cut["error"] = exc

        thread = threading.Thread(target=worker)
        thread.start()
        assert first.wait(10)
        os.kill(child, signal.SIGKILL)
        killed.set()
        thread.join(20)
        assert "error" in cut  # the worker saw its stream break, as from a dropped connection
        wait_until(lambda: _pid(gw) not in (None, child), 20, "a restarted server child")
        reply = call(gw.base(token) + "/v1/messages", main_call())  # the worker's retry, same token
        assert reply.status == 200 and reply.events()[-1]["type"] == "message_stop"
        usage = usage_of(settled(gw))
        assert usage["total"]["requests"] == 1 and usage["total"]["output_tokens"] == 7
        assert [(e["kind"], e["id"]) for e in ledger_of(gw.folder)] == [("tool_use", "toolu_faults1")]
        assert len(read_exchanges(gw.folder.exchanges(1))) == 1
        restarts = [e for e in events_of(gw.folder) if e["event"] == "started" and e["data"].get("restart")]
        assert len(restarts) == 1


def _pid(gw: Running) -> int | None:
    try:
        return int(health(gw)["pid"])
    except (AssertionError, OSError):
        return None

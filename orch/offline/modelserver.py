"""A scripted model server: the Anthropic Messages API (Claude Code), the OpenAI Responses API
(`/responses`, Codex CLI: orch.offline.responses), OpenAI Chat Completions (opencode, aider:
orch.offline.chat) and Google's Gemini API (Gemini CLI: orch.offline.gemini), driving the real agent
binaries without credentials.

Tests, the offline demo and dry runs point workers at it (`ANTHROPIC_BASE_URL=http://127.0.0.1:PORT`,
any dummy `ANTHROPIC_API_KEY`). The model is stateless: every answer is derived from the request's
message history, so retries, restarts and parallel workers need no bookkeeping here.

The script format, and how the next answer follows from the messages: orch.offline.script (pure).
This module is the HTTP side: the handler, streaming (SSE), errors and the request log. Side calls
(no tools offered, JSON output asked for, or not streamed: session titles) get a short text or a
minimal JSON object and never advance the script.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import logging
import os
import signal
import sys
import threading
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

from orch.jsonsample import sample
from orch.offline import aider, chat, gemini, responses
from orch.offline.script import Answer, next_answer, prompt_text

log = logging.getLogger(__name__)

FAILURES = {
    "rate_limit": (429, "rate_limit_error", "Scripted rate limit"),
    "overloaded": (529, "overloaded_error", "Scripted overload"),
    "authentication": (401, "authentication_error", "Scripted authentication failure"),
}


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


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    # Headers and body go out as two writes: with Nagle on, the body waits for the client's delayed ACK
    # (~40 ms per answer on a kept-alive connection).
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read `requests` instead
        pass

    def do_HEAD(self) -> None:
        self._send_json(200 if urlsplit(self.path).path == "/" else 404, {}, body=False)

    def do_GET(self) -> None:
        if urlsplit(self.path).path == "/":
            self._send_json(200, {"status": "ok", "server": "orch scripted model"})
        else:
            self._not_found()

    def _read_body(self) -> bytes:
        """The request body, by Content-Length or chunked: an unread body would be parsed as the next
        request on this keep-alive connection (and answered 404, which Claude Code reports as
        "model not found")."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()  # the CRLF after each chunk
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                pass
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        raw = self._read_body()
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body is not a JSON object")
        except ValueError as exc:
            self._record(path, {}, "bad_request")
            self._send_json(400, _error("invalid_request_error", f"bad JSON body: {exc}"))
            return
        if path == "/v1/messages/count_tokens":
            self._record(path, body, "count_tokens")
            self._send_json(200, {"input_tokens": _tokens(raw.decode(errors="replace"))})
        elif path == "/v1/messages":
            self._messages(path, body, _tokens(raw.decode(errors="replace")))
        elif responses.handles(path):
            self._responses(path, body, _tokens(raw.decode(errors="replace")))
        elif chat.is_chat_path(path):
            self._chat(path, body, _tokens(raw.decode(errors="replace")))
        elif gemini.route(path):
            self._gemini(path, body, len(raw))
        else:
            self._not_found()

    def _messages(self, path: str, body: dict[str, Any], input_tokens: int) -> None:
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        output_format = (body.get("output_config") or {}).get("format")
        schema = output_format.get("schema") if isinstance(output_format, dict) else None
        if not body.get("stream") or not body.get("tools") or schema is not None:
            # A side call (session title, topic detection): the pinned Claude Code streams these too,
            # but offers no tools and asks for JSON. Never take a script step here.
            text = json.dumps(sample(schema, "Scripted session")) if isinstance(schema, dict) else "Scripted session"
            answer = Answer("text", text=text, step="side")
        else:
            answer = next_answer(messages)
        self._record(path, body, answer.step)
        model = str(body.get("model") or "scripted")
        if answer.kind == "fail":
            status, kind, message = FAILURES.get(answer.text, (500, "api_error", "Scripted API error"))
            # Without x-should-retry the pinned Claude Code retries with backoff for minutes.
            headers = {"x-should-retry": "false"}
            if answer.retry_after is not None:
                headers["retry-after"] = f"{answer.retry_after:g}"
            self._send_json(status, _error(kind, message), headers=headers)
            return
        message_id = f"msg_{uuid.uuid4().hex}"  # unique ids: Claude Code merges messages sharing one
        if answer.kind == "tool":
            block: dict[str, Any] = {
                "type": "tool_use",
                "id": f"toolu_{uuid.uuid4().hex}",
                "name": answer.tool,
                "input": answer.tool_input,
            }
            stop = "tool_use"
        else:
            block, stop = {"type": "text", "text": answer.text}, "end_turn"
        output_tokens = _tokens(json.dumps(block))
        usage = {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        if not body.get("stream"):
            self._send_json(
                200,
                {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [block],
                    "stop_reason": stop,
                    "stop_sequence": None,
                    "usage": usage,
                },
            )
            return
        self._stream(message_id, model, block, stop, usage)

    def _chat(self, path: str, body: dict[str, Any], input_tokens: int) -> None:
        """OpenAI Chat Completions (orch.offline.chat): the same script, translated both ways."""
        if aider.is_aider(body):  # no tools: the steps go out as edit and shell blocks in one text
            answer = aider.answer(body)
        elif not body.get("tools") or isinstance(body.get("response_format"), dict):
            answer = Answer("text", text="Scripted session", step="side")  # titles, summaries
        else:
            answer = next_answer(chat.neutral_messages(body.get("messages") or []))
        self._record(path, body, answer.step)
        if answer.kind == "fail":
            status, code, message = chat.FAILURES.get(answer.text, (500, "server_error", "Scripted API error"))
            self._send_json(status, chat.error_body(code, message), headers={"x-should-retry": "false"})
        elif not body.get("stream"):
            self._send_json(200, chat.completion(answer, body, input_tokens))
        else:
            self._send_sse(chat.stream_events(answer, body, input_tokens))

    def _gemini(self, path: str, body: dict[str, Any], size: int) -> None:
        reply = gemini.answer(path, body, size)
        model = (gemini.route(path) or ("", ""))[0]
        stream = reply.content_type == "text/event-stream"
        self._record(path, {"model": model, "stream": stream}, reply.step, gemini.prompt(gemini.messages(body)))
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(reply.body)

    def _stream(self, message_id: str, model: str, block: dict[str, Any], stop: str, usage: dict[str, int]) -> None:
        start = {**block, "input": {}} if block["type"] == "tool_use" else {"type": "text", "text": ""}
        if block["type"] == "tool_use":
            payload = json.dumps(block["input"])
            half = len(payload) // 2  # two fragments, as the real API sends partial JSON
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in (payload[:half], payload[half:])]
        else:
            deltas = [{"type": "text_delta", "text": block["text"]}]
        message: dict[str, Any] = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**usage, "output_tokens": 1},
        }
        events: list[dict[str, Any]] = [
            {"type": "message_start", "message": message},
            {"type": "content_block_start", "index": 0, "content_block": start},
            {"type": "ping"},
            *({"type": "content_block_delta", "index": 0, "delta": d} for d in deltas),
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
            {"type": "message_stop"},
        ]
        data = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", f"req_{uuid.uuid4().hex}")
        self.end_headers()
        self.wfile.write(data)

    def _responses(self, path: str, body: dict[str, Any], input_tokens: int) -> None:
        """The OpenAI Responses API (Codex): the same script, translated by orch.offline.responses."""
        answer = responses.answer(body)
        self._record(path, body, answer.step, responses.prompt(body))
        if answer.kind == "fail":
            status, _, message = FAILURES.get(answer.text, (500, "api_error", "Scripted API error"))
            self._send_json(status, responses.error(status, message), headers={"x-should-retry": "false"})
            return
        item = responses.output_item(answer)
        done = responses.response(str(body.get("model") or "scripted"), item, {})
        done["usage"] = responses.usage(input_tokens, _tokens(json.dumps(item)))
        if not body.get("stream"):
            self._send_json(200, done)
            return
        events = responses.stream_events(done)
        self._send_sse("".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode())

    def _send_sse(self, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", f"req_{uuid.uuid4().hex}")
        self.end_headers()
        self.wfile.write(data)

    def _not_found(self) -> None:
        log.warning("scripted model server: no such endpoint %s %s", self.command, self.path[:200])
        self._record(urlsplit(self.path).path, {}, "not_found")
        self._send_json(404, _error("not_found_error", f"no such endpoint: {urlsplit(self.path).path}"))

    def _send_json(
        self, status: int, payload: dict[str, Any], body: bool = True, headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if body:
            self.wfile.write(data)

    def _record(self, path: str, body: dict[str, Any], step: str, prompt: str | None = None) -> None:
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        prompt = prompt or next((t for m in reversed(messages) if (t := prompt_text(m))), None)
        model = body.get("model")
        api_key = self.headers.get("x-api-key") or self.headers.get("x-goog-api-key") or ""
        key, auth = api_key, "api-key" if api_key else "none"
        bearer = self.headers.get("Authorization") or ""
        if bearer.lower().startswith("bearer "):
            key, auth = bearer[7:], "bearer"
        record = RequestRecord(
            path,
            model if isinstance(model, str) else None,
            bool(body.get("stream")),
            prompt,
            step,
            auth,
            key_digest(key) if key else "",
        )
        with self.server.lock:
            self.server.log.append(record)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(address, _Handler)
        self.lock = threading.Lock()
        self.log: list[RequestRecord] = []


class ScriptedModelServer:
    """Serve the scripted model in a daemon thread: `with ScriptedModelServer() as srv: srv.url`."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host, self.port = host, port
        self.url = ""
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def requests(self) -> list[RequestRecord]:
        """A snapshot of the request log, oldest first."""
        if self._server is None:
            return []
        with self._server.lock:
            return list(self._server.log)

    def start(self) -> ScriptedModelServer:
        self._server = _Server((self.host, self.port))
        self.port = self._server.server_address[1]
        self.url = f"http://{self.host}:{self.port}"
        # A short poll interval: shutdown() waits for it, and tests start and stop many servers.
        serve = functools.partial(self._server.serve_forever, poll_interval=0.05)
        self._thread = threading.Thread(target=serve, name="orch-model", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; `requests` stays readable."""
        if self._server is not None and self._thread is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
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
    args = parser.parse_args(argv)
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with ScriptedModelServer(args.host, args.port) as server:
            print(server.url, flush=True)
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

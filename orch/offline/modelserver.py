"""A scripted Anthropic Messages-API server: drives the real Claude Code binary without credentials.

Tests, the offline demo and dry runs point workers at it (`ANTHROPIC_BASE_URL=http://127.0.0.1:PORT`,
any dummy `ANTHROPIC_API_KEY`). The model is stateless: every answer is derived from the request's
message history, so retries, restarts and parallel workers need no bookkeeping here.

The script is a fenced block, one JSON object per line, either in the prompt itself or in a brief:
when the prompt names an absolute `*.md` path, the model first Reads it and takes the script from
the tool result (line-number prefixes stripped). Prose around the block is ignored.

    ```orch-script
    {"bash": "echo hi >> /tmp/x"}                 -> Bash tool_use
    {"write": "/abs/file.md", "content": "a\\nb"}  -> Write tool_use
    {"read": "/abs/path"}                         -> Read tool_use
    {"tool": "WebFetch", "input": {...}}          -> any other tool_use by name
    {"reply": "final text"}                       -> text, end_turn
    {"fail": "rate_limit"}                        -> HTTP 429 (overloaded: 529, authentication: 401,
                                                     anything else: 500)
    ```

Position in the script: each tool_use the assistant sent since the script arrived passes one tool
step. A reply or fail step is passed by the next user prompt. So a fail step fails every request
that reaches it (the error says `x-should-retry: false`, so Claude Code gives up at once and fires
StopFailure) and a nudge such as "continue" resumes after it. A later prompt without a script of
its own continues the latest script. Steps exhausted -> "Done."; no script anywhere -> "OK".
Side calls (no tools offered, JSON output asked for, or not streamed: session titles) get a short
text or a minimal JSON object and never advance the script.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import re
import signal
import sys
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

SCRIPT_RE = re.compile(r"```orch-script[^\n]*\n(.*?)```", re.DOTALL)
REMINDER_RE = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)
BRIEF_RE = re.compile(r"(/[^\s'\"`<>()]+\.md)\b")
INTERRUPTED_RE = re.compile(r"^\[Request interrupted by user[^\]]*\]$", re.MULTILINE)
# Read returns numbered lines: "1\ttext" in Claude Code 2.1.332, "     1→text" in other builds.
LINE_NO_RE = re.compile(r"^ *\d+(?:→|\t)", re.MULTILINE)
FAILURES = {
    "rate_limit": (429, "rate_limit_error", "Scripted rate limit"),
    "overloaded": (529, "overloaded_error", "Scripted overload"),
    "authentication": (401, "authentication_error", "Scripted authentication failure"),
}
TOOLS = {"bash": "Bash", "write": "Write", "read": "Read"}

Message = dict[str, Any]


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
    """Which credential came, never its value: "api-key" (x-api-key), "bearer" (Authorization), "none"."""


@dataclass
class Answer:
    """The next assistant move: a text turn, one tool call, or an HTTP error."""

    kind: str  # "text" | "tool" | "fail"
    text: str = ""
    tool: str = ""
    tool_input: dict[str, Any] = field(default_factory=dict)
    step: str = ""


# ---------------------------------------------------------------- reading the conversation


def _blocks(message: Message) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _text(content: Any) -> str:
    """Text of a message or tool_result content, without Claude Code's system reminders."""
    if isinstance(content, str):
        parts = [content]
    else:
        parts = [b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"]
    return "\n".join(REMINDER_RE.sub("", p).strip() for p in parts if p).strip()


def prompt_text(message: Message) -> str | None:
    """The text someone typed into a user turn, else None.

    Tool results do not count, but text next to them does: Claude Code merges a prompt sent after a
    failed turn into the user message that holds the last tool_result.
    """
    if message.get("role") != "user":
        return None
    text = INTERRUPTED_RE.sub("", _text(_blocks(message))).strip()
    return text or None


def parse_script(text: str) -> list[dict[str, Any]] | None:
    """The orch-script steps in `text` (None when it has no block); raises ValueError on bad lines."""
    match = SCRIPT_RE.search(text)
    if match is None:
        return None
    steps: list[dict[str, Any]] = []
    for number, line in enumerate(match.group(1).splitlines(), 1):
        if not line.strip():
            continue
        try:
            step = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"orch-script line {number} is not JSON: {exc}") from None
        if not isinstance(step, dict) or not ({*TOOLS, "tool", "reply", "fail"} & step.keys()):
            raise ValueError(f"orch-script line {number} is not a known step: {line.strip()}")
        steps.append(step)
    return steps


def _tool_results(message: Message) -> dict[str, dict[str, Any]]:
    return {str(b.get("tool_use_id")): b for b in _blocks(message) if b.get("type") == "tool_result"}


def _find_brief(messages: list[Message], start: int, path: str) -> tuple[int, str] | Answer:
    """After the prompt at `start`: (index, text) of the brief's first successful Read, else what to do."""
    pending: dict[str, int] = {}
    failure: tuple[int, str] | None = None
    for index in range(start + 1, len(messages)):
        message = messages[index]
        if message.get("role") == "assistant":
            for block in _blocks(message):
                is_read = block.get("type") == "tool_use" and block.get("name") == "Read"
                if is_read and (block.get("input") or {}).get("file_path") == path:
                    pending[str(block.get("id"))] = index
            continue
        for use_id, result in _tool_results(message).items():
            if use_id in pending:
                if not result.get("is_error"):
                    return index, LINE_NO_RE.sub("", _text(result.get("content")))
                failure = (index, _text(result.get("content")))
    if failure is not None and not any(prompt_text(m) for m in messages[failure[0] + 1 :]):
        return Answer("text", text=f"Could not read {path}: {failure[1]}", step="brief-error")
    return Answer("tool", tool="Read", tool_input={"file_path": path}, step="Read")


def _script_source(messages: list[Message]) -> tuple[int, str] | Answer | None:
    """The latest prompt carrying a script (inline or via a brief): (anchor index, script text)."""
    for index in range(len(messages) - 1, -1, -1):
        text = prompt_text(messages[index])
        if text is None:
            continue
        if SCRIPT_RE.search(text):
            return index, text
        brief = BRIEF_RE.search(text)
        if brief:
            return _find_brief(messages, index, brief.group(1))
    return None


def _step_answer(step: dict[str, Any]) -> Answer:
    if "reply" in step:
        return Answer("text", text=str(step["reply"]), step="reply")
    if "fail" in step:
        return Answer("fail", text=str(step["fail"]), step=f"fail:{step['fail']}")
    if "tool" in step:  # any other tool by name, e.g. one outside the allow list (a permission prompt)
        given = step.get("input")
        return Answer("tool", tool=str(step["tool"]), tool_input=given if isinstance(given, dict) else {}, step="tool")
    key = next(k for k in TOOLS if k in step)
    tool_input: dict[str, Any]
    if key == "bash":
        tool_input = {"command": step["bash"], "description": "scripted step"}
    elif key == "write":
        tool_input = {"file_path": step["write"], "content": step.get("content", "")}
    else:
        tool_input = {"file_path": step["read"]}
    return Answer("tool", tool=TOOLS[key], tool_input=tool_input, step=TOOLS[key])


def next_answer(messages: list[Message]) -> Answer:
    """The scripted model: derive the next move from the message history alone."""
    source = _script_source(messages)
    if source is None:
        return Answer("text", text="OK", step="ok")
    if isinstance(source, Answer):
        return source
    anchor, text = source
    try:
        script = parse_script(text) or []
    except ValueError as exc:
        return Answer("text", text=str(exc), step="script-error")
    # What happened since the script arrived: "T" per tool call, "P" per user prompt.
    events: list[str] = []
    for message in messages[anchor + 1 :]:
        if message.get("role") == "assistant":
            events += ["T" for b in _blocks(message) if b.get("type") == "tool_use"]
        elif prompt_text(message) is not None:
            events.append("P")
    cursor = 0
    for step in script:
        tool_step = not ({"reply", "fail"} & step.keys())
        while tool_step and cursor < len(events) and events[cursor] == "P":
            cursor += 1  # a nudge while a tool step is due (e.g. after an interrupt) changes nothing
        if cursor >= len(events):
            return _step_answer(step)
        if tool_step or events[cursor] == "P":
            cursor += 1
    return Answer("text", text="Done.", step="done")


# ---------------------------------------------------------------- the HTTP side


def _sample(schema: dict[str, Any]) -> Any:
    """A small value that satisfies a JSON schema (enough for titles: {"title": "Scripted session"})."""
    kind = schema.get("type")
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "object":
        return {k: _sample(v) for k, v in (schema.get("properties") or {}).items() if isinstance(v, dict)}
    samples = {"string": "Scripted session", "boolean": False, "integer": 0, "number": 0, "array": []}
    return samples.get(str(kind))


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

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
        else:
            self._not_found()

    def _messages(self, path: str, body: dict[str, Any], input_tokens: int) -> None:
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        output_format = (body.get("output_config") or {}).get("format")
        schema = output_format.get("schema") if isinstance(output_format, dict) else None
        if not body.get("stream") or not body.get("tools") or schema is not None:
            # A side call (session title, topic detection): Claude Code 2.1.332 streams these too,
            # but offers no tools and asks for JSON. Never take a script step here.
            text = json.dumps(_sample(schema)) if isinstance(schema, dict) else "Scripted session"
            answer = Answer("text", text=text, step="side")
        else:
            answer = next_answer(messages)
        self._record(path, body, answer.step)
        model = str(body.get("model") or "scripted")
        if answer.kind == "fail":
            status, kind, message = FAILURES.get(answer.text, (500, "api_error", "Scripted API error"))
            # Without x-should-retry Claude Code 2.1.332 retries with backoff for minutes.
            self._send_json(status, _error(kind, message), headers={"x-should-retry": "false"})
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

    def _record(self, path: str, body: dict[str, Any], step: str) -> None:
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        prompt = next((t for m in reversed(messages) if (t := prompt_text(m))), None)
        model = body.get("model")
        auth = "api-key" if self.headers.get("x-api-key") else "none"
        if (self.headers.get("Authorization") or "").lower().startswith("bearer "):
            auth = "bearer"
        record = RequestRecord(
            path, model if isinstance(model, str) else None, bool(body.get("stream")), prompt, step, auth
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

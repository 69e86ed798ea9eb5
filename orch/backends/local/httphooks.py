"""A local strict worker's hooks as HTTP requests, served by the run's relay on the worker's own socket.

Claude Code can send a hook event as an HTTP POST instead of running a command (`"type": "http"`: the
event's JSON as the body, the hook's JSON answer as the response). A command hook is a shell and a Python
start per event, some ten a model turn, which cost a worker more CPU than the agent's own turn loop (bench
`roles`); a POST to a process that is running anyway costs a fraction of a millisecond. Inside its sandbox
the worker's portal listens on bwrap.HOOK_PORT of its own loopback (orch.backends.local.portal) and copies
each connection to its `hooks.sock` here, bound into that sandbox alone: every event that arrives on it is
worker n's, and is logged to worker n's hook log only, as the hook writer logs it
(orch.run.hookwriter.log_event: the same slimming, the same answer to a PermissionRequest from the run's
policy).

A request is `POST /hook/EVENT HTTP/1.1` with a Content-Length body; the answer `200` with a JSON body, and
the connection is closed. The parsing is this narrow on purpose (aiohttp's parser would cost the relay's
start more than the relay itself): a request line and headers within HEAD_LIMIT, a body within BODY_LIMIT,
the whole request within TIMEOUT, at most CONNECTIONS open per worker. Anything else is answered 400, 411
or 413 and closed; an event whose body was too big is still logged, with its name from the path, as
`oversized`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from orch.backends.local.connections import ConnectionCap
from orch.run.hookwriter import log_event

PATH = "/hook/"
HEAD_LIMIT = 16 << 10
BODY_LIMIT = 4 << 20
"""An honest event is far smaller (Claude Code caps a tool's output it shows the model); a bigger one is
logged without its body, so one worker cannot make the relay parse megabytes for every event."""
TIMEOUT = 10.0
CONNECTIONS = 8
STATUS = {200: "OK", 400: "Bad Request", 411: "Length Required", 413: "Content Too Large", 503: "Busy"}


def _response(code: int, body: dict[str, Any] | None = None) -> bytes:
    data = json.dumps(body or {}).encode()
    head = f"HTTP/1.1 {code} {STATUS[code]}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    return head.encode() + b"Connection: close\r\n\r\n" + data


class Request:
    """The parts of one request this server reads."""

    def __init__(self, event: str, length: int | None) -> None:
        self.event, self.length = event, length


def parse_head(head: bytes) -> Request | int:
    """A request's line and headers: the Request, or the status to refuse it with."""
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
    except ValueError:
        return 400
    if method != "POST" or not target.startswith(PATH) or not version.startswith("HTTP/1."):
        return 400
    length = None
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            continue
        name, value = name.strip().lower(), value.strip()
        if name == "transfer-encoding":
            return 411  # Claude Code sends a Content-Length; a chunked body is not a hook's
        if name == "content-length":
            if not value.isdigit() or length is not None:
                return 400
            length = int(value)
    if length is None:
        return 411
    event = target[len(PATH) :]
    if not event.isascii() or not event.isalnum():
        return 400
    return Request(event, length)


class HookServer:
    """Worker n's hooks socket: each request logged to its hook log, its answer sent back."""

    def __init__(self, state_file: str, policy_file: str, cap: ConnectionCap) -> None:
        self.state_file, self.policy_file, self.cap = state_file, policy_file, cap

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.cap.admit():
            writer.write(_response(503))
            writer.close()
            return
        try:
            writer.write(await asyncio.wait_for(self._answer(reader), TIMEOUT))
            await asyncio.wait_for(writer.drain(), TIMEOUT)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # gone, silent or garbled: dropped, as a hook command that never ran
        finally:
            self.cap.release()
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader) -> bytes:
        request = parse_head(await reader.readuntil(b"\r\n\r\n"))
        if isinstance(request, int):
            return _response(request)
        assert request.length is not None
        if request.length > BODY_LIMIT:
            left = request.length
            while left:  # read and dropped in pieces: never held whole
                left -= len(await reader.readexactly(min(left, 1 << 16)))
            log_event({"hook_event_name": request.event, "oversized": request.length}, self.state_file, None)
            return _response(413)
        body = await reader.readexactly(request.length)
        try:
            payload = json.loads(body or b"{}")
        except ValueError:
            payload = {"hook_event_name": "unparseable"}
        if not isinstance(payload, dict):
            payload = {"hook_event_name": "unknown"}
        payload.setdefault("hook_event_name", request.event)
        policy = self.policy_file if payload["hook_event_name"] == "PermissionRequest" else None
        try:
            answer = log_event(payload, self.state_file, policy)
        except OSError:  # never block the agent because the run folder went away
            answer = None
        return _response(200, answer)

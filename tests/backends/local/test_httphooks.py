"""A sandboxed worker's hooks over HTTP (orch.backends.local.httphooks), served on a real Unix socket as the relay
serves it: an event is logged to that worker's hook log as the hook writer logs it, a PermissionRequest is answered
from the run's policy, and a hostile worker's requests (garbled, chunked, oversized, silent, a flood) cost it
its own events at worst, never the relay's memory, another worker's log or an unlogged refusal."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from orch.backends.local import httphooks
from orch.backends.local.connections import ConnectionCap
from orch.run.events import Event
from orch.run.folder import RunFolder
from tests.helpers import run_events, run_info


@pytest.fixture
def run(tmp_path: Path) -> RunFolder:
    folder = RunFolder.for_name("hooksrun")
    folder.create(run_info("hooksrun", workers=2, workdir=str(tmp_path)))
    return folder


def _serve(run: RunFolder, path: Path, talk: Callable[[], Awaitable[list[bytes]]]) -> list[bytes]:
    """Serve worker 1's hooks on `path` while `talk` runs; what it got back, once every connection ended."""

    async def main() -> list[bytes]:
        cap = ConnectionCap(run, 1, path, httphooks.CONNECTIONS)
        hooks = httphooks.HookServer(str(run.state(1)), str(run.permission_policy), cap)
        server = await asyncio.start_unix_server(hooks.serve, path=str(path), limit=httphooks.HEAD_LIMIT)
        try:
            got = await talk()

            async def drained() -> None:  # the server's side of each connection has ended (cancelled, it logs)
                while cap.open:
                    await asyncio.sleep(0.001)

            await asyncio.wait_for(drained(), 10.0)
            return got
        finally:
            server.close()

    return asyncio.run(main())


async def _send(path: Path, raw: bytes, read: bool = True) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(raw)
    await writer.drain()
    answer = await reader.read() if read else b""
    writer.close()
    return answer


def _post(event: str, body: bytes) -> bytes:
    head = f"POST /hook/{event} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    return head.encode() + f"Content-Length: {len(body)}\r\n\r\n".encode() + body


def _body(answer: bytes) -> tuple[int, object]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body) if body else None


def test_an_event_is_logged_as_the_hook_writer_logs_it(run: RunFolder, tmp_path: Path) -> None:
    path = tmp_path / "hooks.sock"
    payload = {
        "hook_event_name": "PreToolUse",
        "session_id": "s1",
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
    }
    post = {"hook_event_name": "PostToolUse", "tool_response": "x" * 100_000, "transcript_path": "/t"}

    async def talk() -> list[bytes]:
        return [
            await _send(path, _post("PreToolUse", json.dumps(payload).encode())),
            await _send(path, _post("PostToolUse", json.dumps(post).encode())),
        ]

    answers = _serve(run, path, talk)
    assert [_body(a) for a in answers] == [(200, {}), (200, {})]
    events = run.hook_events(1)
    assert [(e.hook_event_name, e.session_id, e.tool_name) for e in events] == [
        ("PreToolUse", "s1", "Bash"),
        ("PostToolUse", None, None),
    ]
    line = run.state(1).read_text().splitlines()[1]
    assert "tool_response" not in line and "transcript_path" not in line  # slimmed, as the writer slims
    assert not run.state(2).read_text()


@pytest.mark.parametrize(
    ("policy", "decision"),
    [({"answer": "allow"}, {"behavior": "allow"}), ({"answer": "ask"}, None)],
    ids=["allow", "ask"],
)
def test_a_permission_request_is_answered_from_the_policy(
    run: RunFolder, tmp_path: Path, policy: dict[str, str], decision: dict[str, str] | None
) -> None:
    run.permission_policy.write_text(json.dumps(policy))
    path = tmp_path / "hooks.sock"
    body = json.dumps({"hook_event_name": "PermissionRequest", "tool_name": "Bash"}).encode()

    async def talk() -> list[bytes]:
        return [await _send(path, _post("PermissionRequest", body))]

    (answer,) = _serve(run, path, talk)
    expected = {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": decision}} if decision else {}
    assert _body(answer) == (200, expected)
    assert run.hook_events(1)[-1].hook_event_name == "PermissionRequest"


def test_bad_requests_are_refused_and_oversized_events_logged_by_name(run: RunFolder, tmp_path: Path) -> None:
    path = tmp_path / "hooks.sock"
    big = httphooks.BODY_LIMIT + 1

    async def talk() -> list[bytes]:
        oversized = f"POST /hook/Stop HTTP/1.1\r\nContent-Length: {big}\r\n\r\n".encode() + b"{" * big
        return [
            await _send(path, b"GET /hook/Stop HTTP/1.1\r\n\r\n"),
            await _send(path, b"POST /hook/Stop HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
            await _send(path, b"POST /hook/Stop HTTP/1.1\r\n\r\n"),
            await _send(path, b"POST /hook/../etc HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"),
            await _send(path, _post("Stop", b"[1, 2]")),
            await _send(path, _post("Stop", b"{not json")),
            await _send(path, oversized),
            await _send(path, b"POST /hook/Stop HTTP/1.1\r\nX: " + b"a" * (httphooks.HEAD_LIMIT + 10)),
        ]

    answers = _serve(run, path, talk)
    assert [_body(a)[0] for a in answers[:7]] == [400, 411, 411, 400, 200, 200, 413]
    assert answers[7] == b""  # a head past the limit: dropped unanswered
    assert [e.hook_event_name for e in run.hook_events(1)] == ["unknown", "unparseable", "Stop"]
    assert json.loads(run.state(1).read_text().splitlines()[-1])["oversized"] == big


def test_a_flood_of_silent_connections_is_capped_and_logged(run: RunFolder, tmp_path: Path) -> None:
    path = tmp_path / "hooks.sock"

    async def talk() -> list[bytes]:
        held = [await asyncio.open_unix_connection(str(path)) for _ in range(httphooks.CONNECTIONS)]
        await asyncio.sleep(0)  # each accepted and counted: the loop runs their callbacks
        refused = await _send(path, b"")  # refused before it reads a byte: its answer comes unasked
        for _, writer in held:
            writer.close()
        return [refused]

    (refused,) = _serve(run, path, talk)
    assert _body(refused)[0] == 503
    assert [(e["worker"], e["data"]["socket"]) for e in run_events(run, Event.CONNECTIONS_CAPPED)] == [
        (1, "hooks.sock")
    ]

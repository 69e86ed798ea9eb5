"""The scripted model over the Gemini API, on a conversation Gemini CLI 0.61.0 really sent."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from orch.offline.apis import gemini
from orch.offline.modelserver import ScriptedModelServer

CAPTURED = json.loads((Path(__file__).parents[2] / "gateway" / "apis" / "data" / "gemini-cli-0.61.0.json").read_text())
REQUEST: dict[str, Any] = CAPTURED["request"]
PATH = CAPTURED["path"].split("?", 1)[0]


def _parts(body: bytes) -> list[dict[str, Any]]:
    text = body.decode()
    chunk = json.loads(text[len("data: ") :] if text.startswith("data: ") else text)
    return list(chunk["candidates"][0]["content"]["parts"])


@pytest.mark.parametrize(
    ("turns", "step", "tool"),
    [
        (1, "Read", "read_file"),
        (3, "Bash", "run_shell_command"),
        (5, "Write", "write_file"),
        (7, "Bash", "run_shell_command"),
        (9, "reply", None),
    ],
)
def test_each_point_of_the_conversation_gets_the_next_step(turns: int, step: str, tool: str | None) -> None:
    body = {**REQUEST, "contents": REQUEST["contents"][:turns]}
    reply = gemini.answer(PATH, body, 5000)
    assert (reply.status, reply.content_type, reply.step) == (200, "text/event-stream", step)
    (part,) = _parts(reply.body)
    if tool is None:
        assert part == {"text": "Finished."}
    else:
        assert part["functionCall"]["name"] == tool


def test_the_replayed_call_is_the_one_gemini_cli_ran() -> None:
    """The arguments the script gives are the ones Gemini CLI echoed back with its own call ids."""
    echoed = [p["functionCall"] for c in REQUEST["contents"] for p in c["parts"] if "functionCall" in p]
    for n, call in enumerate(echoed):
        reply = gemini.answer(PATH, {**REQUEST, "contents": REQUEST["contents"][: 2 * n + 1]}, 100)
        (part,) = _parts(reply.body)
        assert part["functionCall"] == {"name": call["name"], "args": call["args"]}


def test_session_context_is_never_a_brief() -> None:
    listing = "<session_context>\nShowing up to 200 items:\n/w/notes.md\n/w/README.md\n</session_context>"
    body = {"contents": [{"role": "user", "parts": [{"text": listing}, {"text": "hello"}]}], "tools": [{}]}
    history = gemini.messages(body)
    assert history == [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    reply = gemini.answer("/v1beta/models/m:streamGenerateContent", body, 10)
    assert _parts(reply.body) == [{"text": "OK"}]


def test_side_calls_get_json_that_fits_and_take_no_step() -> None:
    body = dict(CAPTURED["side_request"])
    reply = gemini.answer(CAPTURED["side_path"], body, 100)
    assert (reply.step, reply.content_type) == ("side", "application/json")
    (part,) = _parts(reply.body)
    answer = json.loads(part["text"])
    schema = body["generationConfig"]["responseJsonSchema"]
    assert set(answer) == set(schema["properties"])


@pytest.mark.parametrize(
    ("fail", "status", "name"), [("rate_limit", 429, "RESOURCE_EXHAUSTED"), ("boom", 500, "INTERNAL")]
)
def test_a_fail_step_is_a_google_error(fail: str, status: int, name: str) -> None:
    script = f'```orch-script\n{{"fail": "{fail}"}}\n```'
    body = {"contents": [{"role": "user", "parts": [{"text": script}]}], "tools": [{}]}
    reply = gemini.answer("/v1beta/models/m:streamGenerateContent", body, 10)
    assert reply.status == status and json.loads(reply.body)["error"]["status"] == name


def test_the_server_routes_gemini_paths_and_logs_the_key_kind() -> None:
    with ScriptedModelServer() as server:
        data = json.dumps({**REQUEST, "contents": REQUEST["contents"][:1]}).encode()
        request = urllib.request.Request(
            server.url + CAPTURED["path"],
            data=data,
            headers={"x-goog-api-key": "k", "content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.headers["content-type"] == "text/event-stream"
            assert b"read_file" in response.read()
        (record,) = server.requests
    assert (record.step, record.auth, record.stream) == ("Read", "api-key", True)
    assert record.prompt and record.prompt.startswith("Read ")

"""The Gemini protocol module, on request bodies Gemini CLI 0.61.0 sent through the gateway: pure, table-driven."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from orch.gateway.apis.anthropic import AnthropicProtocol
from orch.gateway.apis.gemini import GeminiProtocol, call_key
from orch.gateway.modeldir import Exchange, Scheme, Tokens
from orch.gateway.recording.keys import exchange_key
from orch.gateway.recording.translate import translate
from orch.offline.apis import gemini as scripted
from orch.sse import SseParser

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

PROTOCOL = GeminiProtocol()
CAPTURED = json.loads((Path(__file__).parent / "data" / "gemini-cli-0.61.0.json").read_text())
REQUEST: dict[str, Any] = CAPTURED["request"]
PATH = CAPTURED["path"].split("?", 1)[0]
# The real API's stream shape (Google's GenerateContentResponse; written from its documentation, not
# captured: this machine reaches no model API): text and a call in two chunks, usage totals in the last.
API_STREAM = (
    b'data: {"candidates": [{"content": {"role": "model", "parts": [{"text": "Let me look."}]}, "index": 0}],'
    b' "modelVersion": "gemini-2.5-pro", "responseId": "r1"}\r\n\r\n'
    b'data: {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": "run_shell_command",'
    b' "args": {"command": "ls"}}}]}, "finishReason": "STOP", "index": 0}], "usageMetadata": {"promptTokenCount":'
    b' 1200, "cachedContentTokenCount": 1000, "candidatesTokenCount": 30, "thoughtsTokenCount": 70,'
    b' "totalTokenCount": 1300}, "modelVersion": "gemini-2.5-pro", "responseId": "r1"}\r\n\r\n'
)


def _read(stream: bytes, size: int) -> Any:
    parser, reader = SseParser(), PROTOCOL.stream_reader({})
    for i in range(0, len(stream), size):
        for event in parser.feed(stream[i : i + size]):
            reader.feed(event)
    return reader.outcome()


@pytest.mark.parametrize(
    ("method", "path", "kind"),
    [
        ("POST", "/v1beta/models/gemini-2.5-pro:streamGenerateContent", "messages"),
        ("POST", "/v1beta/models/gemini-3.5-flash-lite:generateContent", "messages"),
        ("POST", "/v1/models/gemini-2.5-pro:countTokens", "count_tokens"),
        ("GET", "/v1beta/models/gemini-2.5-pro:generateContent", "other"),
        ("POST", "/v1beta/models", "other"),
        ("POST", "/v1/messages", "other"),
        ("POST", "/v1beta/models/a/b:generateContent", "other"),
    ],
)
def test_paths_are_claimed_by_one_protocol(method: str, path: str, kind: str) -> None:
    assert PROTOCOL.kind(method, path) == kind
    if kind != "other":  # never claimed twice: the gateway picks the protocol by path
        assert AnthropicProtocol().kind(method, path) == "other"


@pytest.mark.parametrize("size", [1, 9, 100, len(API_STREAM)])
def test_stream_usage_model_and_calls_whatever_the_chunking(size: int) -> None:
    outcome = _read(API_STREAM, size)
    assert outcome.complete and outcome.model == "gemini-2.5-pro"
    # Cached prompt tokens are cache reads; thoughts are billed as output.
    assert outcome.usage == Tokens(input_tokens=200, output_tokens=100, cache_read_input_tokens=1000)
    (use,) = outcome.tool_uses
    assert (use.name, use.input, use.id) == (
        "run_shell_command",
        {"command": "ls"},
        call_key("run_shell_command", {"command": "ls"}),
    )


def test_a_cut_stream_is_not_complete() -> None:
    assert not _read(API_STREAM[: API_STREAM.index(b"data:", 10)], 50).complete


def test_tool_results_pair_with_the_calls_the_responses_made() -> None:
    """Gemini CLI gives each call its own id after the response (the gateway never saw it): a result is
    ledgered under the id the gateway gave the call in the response, found through the echoed history."""
    results = PROTOCOL.tool_results(REQUEST)
    calls = [p["functionCall"] for c in REQUEST["contents"] for p in c["parts"] if "functionCall" in p]
    assert [r.tool_use_id for r in results] == [call_key(c["name"], c["args"]) for c in calls]
    assert [c["name"] for c in calls] == ["read_file", "run_shell_command", "write_file", "run_shell_command"]
    assert not any(r.is_error for r in results)
    assert "```orch-script" in results[0].text  # read_file's output, as Gemini CLI sent it back
    # The scripted model's answer to an earlier point of the same conversation names the same call.
    history = {**REQUEST, "contents": REQUEST["contents"][:2]}
    reply = scripted.answer(PATH, {**history, "contents": history["contents"][:1]}, 1000)
    (use,) = _read(reply.body, 64).tool_uses
    assert use.id == results[0].tool_use_id


def test_an_error_result_and_an_id_from_the_api() -> None:
    body = copy.deepcopy(REQUEST)
    body["contents"][1]["parts"][0]["functionCall"]["id"] = "api-call-7"
    body["contents"][2]["parts"][0]["functionResponse"] = {
        "id": "api-call-7",
        "name": "read_file",
        "response": {"error": "File not found."},
    }
    first = PROTOCOL.tool_results(body)[0]
    assert (first.tool_use_id, first.is_error, first.text) == ("api-call-7", True, "File not found.")


@pytest.mark.parametrize(
    "body",
    [{}, {"contents": "x"}, {"contents": [1, None, {"parts": "y"}, {"parts": [None, {"functionResponse": 3}]}]}],
)
def test_hostile_bodies_yield_nothing_and_raise_nothing(body: dict[str, Any]) -> None:
    assert PROTOCOL.tool_results(body) == []
    assert PROTOCOL.response_outcome(body).tool_uses == []
    assert PROTOCOL.replay_parts("/v1beta/models/m:streamGenerateContent", body).kind == "side"


def test_the_gateway_keeps_the_key_and_drops_the_workers_token() -> None:
    assert PROTOCOL.upstream_auth(Scheme.API_KEY, "AIza-secret", {"x-goog-api-key": "orch-token"}) == {
        "x-goog-api-key": "AIza-secret"
    }
    assert "x-goog-api-key" in PROTOCOL.auth_headers
    passed = PROTOCOL.upstream_auth(Scheme.PASSTHROUGH, "", {"x-goog-api-key": "own", "cookie": "c"})
    assert passed == {"x-goog-api-key": "own"}
    assert PROTOCOL.error_body("authentication", "no") == {
        "error": {"code": 401, "message": "no", "status": "UNAUTHENTICATED"}
    }


def test_replay_knows_a_conversation_by_its_first_prompt_not_gemini_clis_session_context() -> None:
    key = exchange_key(CAPTURED["path"], REQUEST, "/run", "/work")
    assert (key.kind, key.turn) == ("main", len(REQUEST["contents"]))
    other_day = copy.deepcopy(REQUEST)
    other_day["contents"][0]["parts"][0]["text"] = "<session_context>\nToday is another day.\n</session_context>"
    assert exchange_key(CAPTURED["path"], other_day, "/run", "/work") == key
    side = exchange_key(CAPTURED["side_path"], CAPTURED["side_request"], "/run", "/work")
    assert side.kind == "side"
    counted = exchange_key("/v1beta/models/m:countTokens", {"contents": []}, "/run", "/work")
    assert counted.kind == "count_tokens"


def test_replay_synthesizes_gemini_answers_for_unseen_side_calls(tmp_path: Path) -> None:
    """A side call the cassette never saw gets a minimal answer in Gemini's own shape."""
    side = PROTOCOL.synthesised(CAPTURED["side_path"], CAPTURED["side_request"], "side", "t")
    assert (side.content_type, side.stream) == ("application/json", False)
    answer = json.loads(json.loads(side.text)["candidates"][0]["content"]["parts"][0]["text"])
    assert set(answer) == set(CAPTURED["side_request"]["generationConfig"]["responseJsonSchema"]["properties"])
    streamed = PROTOCOL.synthesised(PATH, {"contents": []}, "side", "t")
    assert streamed.stream and _read(streamed.text.encode(), 7).complete
    counted = PROTOCOL.synthesised("/v1beta/models/m:countTokens", {"contents": []}, "count_tokens", "t")
    assert json.loads(counted.text)["totalTokens"] >= 1


def test_replay_translates_a_recorded_stream_into_this_runs_folders() -> None:
    """A replayed call names this run's folders, not the recording's (Gemini CLI would refuse a path outside
    its workspace, and a write would go into the old run)."""
    recorded = API_STREAM.decode().replace('"ls"', '"touch /old/run/outbox/agent-1/done"')
    recorded = recorded.replace("Let me look.", "Looking at /old/run/agent-1.task.md")
    exchange = Exchange.model_validate(
        {"seq": 1, "ts": 0, "worker": 1, "method": "POST", "path": PATH, "request": {}, "status": 200,
         "stream": True, "body": recorded, "key": {"kind": "main", "conversation": "c", "turn": 1}}
    )  # fmt: skip
    moved = translate(exchange, (("/old/run", "/srv/new-run"),)).body
    assert "/old/run" not in moved and moved.count("\r\n\r\n") == 2
    outcome = _read(moved.encode(), 9)
    assert outcome.complete and outcome.tool_uses[0].input == {"command": "touch /srv/new-run/outbox/agent-1/done"}
    assert "Looking at /srv/new-run/agent-1.task.md" in moved
    unchanged = API_STREAM.decode().replace('"ls"', '"pwd"')
    assert translate(exchange.model_copy(update={"body": unchanged}), (("/old/run", "/x"),)).body == unchanged

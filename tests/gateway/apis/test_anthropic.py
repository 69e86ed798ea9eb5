"""The Anthropic protocol (orch/gateway/apis/anthropic.py) and the SSE tee it reads through: pure, table-driven."""

from __future__ import annotations

import json

import pytest

from orch.gateway.apis.anthropic import OAUTH_BETA, AnthropicProtocol
from orch.gateway.modeldir import Scheme, Tokens
from orch.sse import SseParser, split_events

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

PROTOCOL = AnthropicProtocol()


def _sse(*events: dict[str, object]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


STREAM = _sse(
    {"type": "message_start", "message": {"model": "claude-sonnet-4-5", "usage": {"input_tokens": 10,
     "cache_read_input_tokens": 5, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "Bash",
     "input": {}}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"comm'}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": 'and": "ls"}'}},
    {"type": "content_block_stop", "index": 1},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 42}},
    {"type": "message_stop"},
)  # fmt: skip


@pytest.mark.parametrize("size", [1, 7, 64, len(STREAM)])
def test_stream_usage_and_tool_calls_whatever_the_chunking(size: int) -> None:
    parser, reader = SseParser(), PROTOCOL.stream_reader({})
    for i in range(0, len(STREAM), size):
        for event in parser.feed(STREAM[i : i + size]):
            reader.feed(event)
    outcome = reader.outcome()
    assert outcome.complete and outcome.model == "claude-sonnet-4-5"
    assert outcome.usage == Tokens(input_tokens=10, output_tokens=42, cache_read_input_tokens=5)
    assert [(t.id, t.name, t.input) for t in outcome.tool_uses] == [("toolu_1", "Bash", {"command": "ls"})]


def test_a_cut_stream_is_incomplete() -> None:
    parser, reader = SseParser(), PROTOCOL.stream_reader({})
    for event in parser.feed(STREAM[: len(STREAM) // 2]):
        reader.feed(event)
    assert not reader.outcome().complete


def test_crlf_events_and_split_events() -> None:
    assert SseParser().feed(b'data: {"type": "ping"}\r\n\r\n') == [{"type": "ping"}]
    assert split_events("a\n\nb\n\n") == ["a\n\n", "b\n\n"]


def test_json_body_outcome_and_tool_results() -> None:
    body = {"model": "m", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"p": 1}}],
            "usage": {"input_tokens": 3, "output_tokens": 4}}  # fmt: skip
    outcome = PROTOCOL.response_outcome(body)
    assert outcome.usage == Tokens(input_tokens=3, output_tokens=4) and outcome.tool_uses[0].name == "Read"
    request = {"messages": [
        {"role": "user", "content": "hi"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True,
                                       "content": [{"type": "text", "text": "boom"}]},
                                      {"type": "tool_result", "tool_use_id": "t2", "content": "ok"}]},
    ]}  # fmt: skip
    results = PROTOCOL.tool_results(request)
    assert [(r.tool_use_id, r.is_error, r.text) for r in results] == [("t1", True, "boom"), ("t2", False, "ok")]


@pytest.mark.parametrize(
    ("scheme", "incoming", "expected"),
    [
        (Scheme.API_KEY, {}, {"x-api-key": "S"}),
        (Scheme.BEARER, {}, {"authorization": "Bearer S"}),
        (Scheme.OAUTH, {"anthropic-beta": "a,b"}, {"authorization": "Bearer S", "anthropic-beta": f"a,b,{OAUTH_BETA}"}),
        (Scheme.OAUTH, {}, {"authorization": "Bearer S", "anthropic-beta": OAUTH_BETA}),
        (Scheme.PASSTHROUGH, {"x-api-key": "W", "anthropic-beta": "a"}, {"x-api-key": "W"}),
        (Scheme.NONE, {"x-api-key": "W"}, {}),
    ],
)
def test_upstream_auth(scheme: Scheme, incoming: dict[str, str], expected: dict[str, str]) -> None:
    assert PROTOCOL.upstream_auth(scheme, "S", incoming) == expected


def test_kinds_and_errors() -> None:
    assert PROTOCOL.kind("POST", "/v1/messages") == "messages"
    assert PROTOCOL.kind("POST", "/v1/messages/count_tokens") == "count_tokens"
    assert PROTOCOL.kind("GET", "/v1/models") == "other" and not PROTOCOL.billable("GET", "/v1/models")
    assert PROTOCOL.error_body("upstream", "x") == {"type": "error", "error": {"type": "api_error", "message": "x"}}

"""The OpenAI Responses protocol module on bodies captured from Codex CLI 0.171.0 (tests/gateway/apis/data), and
a real gateway serving it beside the Messages API: usage, budgets, the ledger, recording and replay."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orch.gateway.apis import registry as protocols
from orch.gateway.apis.anthropic import AnthropicProtocol
from orch.gateway.apis.openai_responses import ResponsesProtocol, tokens
from orch.gateway.modeldir import Exchange, GatewayBudget, Scheme, Tokens
from orch.gateway.recording.exchanges import read_exchanges
from orch.gateway.recording.translate import translate
from orch.sse import SseParser
from tests.gateway.gw import boot_for, call, events_of, gateway, ledger_of, main_call, settled, usage_of

PROTOCOL = ResponsesProtocol()
CAPTURED: dict[str, Any] = json.loads((Path(__file__).parent / "data" / "codex-responses.json").read_text())
TOOL_TURN = CAPTURED["tool_turn"]


def _outcome(sse: str, size: int) -> Any:
    data, parser, reader = sse.encode(), SseParser(), PROTOCOL.stream_reader({})
    for i in range(0, len(data), size):
        for event in parser.feed(data[i : i + size]):
            reader.feed(event)
    return reader.outcome()


@pytest.mark.parametrize("size", [1, 13, 256, 1 << 20])
def test_captured_stream_whatever_the_chunking(size: int) -> None:
    outcome = _outcome(TOOL_TURN["response_sse"], size)
    assert outcome.complete and outcome.model == "gpt-5.5"
    (use,) = outcome.tool_uses  # output_item.done and response.completed name it once between them
    assert use.name == "exec_command" and use.id.startswith("call_")
    assert use.input["cmd"].startswith("mkdir -p -- ") and "base64 -d >" in use.input["cmd"]
    completed = json.loads(TOOL_TURN["response_sse"].split("data: ")[-1])["response"]["usage"]
    assert outcome.usage == Tokens(input_tokens=completed["input_tokens"], output_tokens=completed["output_tokens"])


def test_a_cut_stream_is_incomplete() -> None:
    sse = TOOL_TURN["response_sse"]
    assert not _outcome(sse[: sse.index("event: response.completed")], 64).complete


def test_captured_tool_results_and_kinds() -> None:
    results = PROTOCOL.tool_results(TOOL_TURN["request"])
    assert len(results) == 2 and not any(r.is_error for r in results)
    assert all(r.tool_use_id.startswith("call_") and "Process exited with code 0" in r.text for r in results)
    assert PROTOCOL.kind("POST", "/responses") == "messages" and PROTOCOL.billable("POST", "/v1/responses")
    assert PROTOCOL.kind("GET", "/responses") == "other" and PROTOCOL.kind("POST", "/responses/compact") == "other"
    assert PROTOCOL.model(TOOL_TURN["request"]) == "gpt-5.5"


def test_a_non_zero_exit_is_an_error_result() -> None:
    def output(text: object) -> dict[str, Any]:
        return {"input": [{"type": "function_call_output", "call_id": "c", "output": text}]}

    failed = "Chunk ID: 1\nWall time: 0.1 seconds\nProcess exited with code 2\nOutput:\nno such file\n"
    assert PROTOCOL.tool_results(output(failed))[0].is_error
    assert not PROTOCOL.tool_results(output(failed.replace("code 2", "code 0")))[0].is_error
    assert not PROTOCOL.tool_results(output("echo 'Process exited with code 1' printed it"))[0].is_error
    assert PROTOCOL.tool_results(output({"content": "x", "success": False}))[0].is_error


def test_json_body_outcome_and_cached_tokens_apart() -> None:
    done = json.loads(TOOL_TURN["response_sse"].split("data: ")[-1])["response"]
    outcome = PROTOCOL.response_outcome(done)
    assert outcome.complete and [u.name for u in outcome.tool_uses] == ["exec_command"]
    usage = {"input_tokens": 1000, "input_tokens_details": {"cached_tokens": 800}, "output_tokens": 50}
    assert tokens(usage) == Tokens(input_tokens=200, output_tokens=50, cache_read_input_tokens=800)
    assert tokens({"input_tokens": True, "output_tokens": "many"}) == Tokens()  # a lying body counts nothing
    assert tokens(None) is None


def test_errors_auth_and_protocol_choice_by_path() -> None:
    error = PROTOCOL.error_body("authentication", "orch gateway: unknown worker token")["error"]
    assert error == {
        "message": "orch gateway: unknown worker token",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
    assert PROTOCOL.upstream_auth(Scheme.BEARER, "sk-real", {"authorization": "Bearer tok"}) == {
        "authorization": "Bearer sk-real"
    }
    incoming = {"authorization": "Bearer own", "x-other": "1"}
    assert PROTOCOL.upstream_auth(Scheme.PASSTHROUGH, "", incoming) == {"authorization": "Bearer own"}
    assert PROTOCOL.upstream_auth(Scheme.NONE, "", incoming) == {}
    assert isinstance(protocols.for_path("/responses"), ResponsesProtocol)
    assert isinstance(protocols.for_path("/v1/responses?x=1"), ResponsesProtocol)
    assert isinstance(protocols.for_path("/v1/messages"), AnthropicProtocol)
    assert protocols.for_path("/v1/models") is protocols.DEFAULT


def test_replay_keys_of_captured_requests() -> None:
    parts = ResponsesProtocol().replay_parts("/responses", TOOL_TURN["request"])
    assert parts.kind == "main" and parts.turn == len(TOOL_TURN["request"]["input"])
    assert parts.first_text.startswith("You are a worker in an orch fleet")  # not Codex's <environment_context>
    assert ResponsesProtocol().replay_parts("/responses", CAPTURED["title"]["request"]).kind == "side"


def _responses_call(text: str, extra: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "model": "gpt-5.5",
        "stream": True,
        "tools": [{"type": "function", "name": "exec_command"}],
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
            *(extra or []),
        ],
    }


def test_a_gateway_serves_responses_beside_messages(tmp_path: Path) -> None:
    script = '```orch-script\n{"bash": "echo hi"}\n{"reply": "Finished."}\n```'
    with gateway(tmp_path) as gw:
        token = gw.client.mint_token(1)
        reply = call(gw.base(token) + "/responses", _responses_call(script))
        assert reply.status == 200 and reply.headers["content-type"].startswith("text/event-stream")
        item = reply.events()[-1]["response"]["output"][0]
        assert item["type"] == "function_call" and json.loads(item["arguments"]) == {"cmd": "echo hi"}
        result = {"type": "function_call_output", "call_id": item["call_id"], "output": "hi\n"}
        second = call(gw.base(token) + "/responses", _responses_call(script, [item, result]))
        assert second.events()[-1]["response"]["output"][0]["content"][0]["text"] == "Finished."
        # The Messages API still works in the same gateway.
        assert call(gw.base(token) + "/v1/messages", main_call("count me")).status == 200
        usage = usage_of(settled(gw))["workers"]["1"]
        assert usage["requests"] == 3 and set(usage["by_model"]) >= {"gpt-5.5"}
        assert usage["by_model"]["gpt-5.5"]["cost_usd"] > 0  # priced (offline: not billed)
        ledger = ledger_of(settled(gw))
        assert [(e["kind"], e["id"]) for e in ledger] == [
            ("tool_use", item["call_id"]),
            ("tool_result", item["call_id"]),
        ]
        assert ledger[1]["output"] == "hi\n"
        assert [e.path for e in read_exchanges(settled(gw).exchanges(1))] == [
            "/responses",
            "/responses",
            "/v1/messages",
        ]
        # Refusals speak the API of the request.
        gw.client.set_budget(GatewayBudget(max_tokens_per_worker=1))
        refused = call(gw.base(token) + "/responses", _responses_call(script))
        assert refused.status == 400 and refused.json()["error"]["type"] == "invalid_request_error"
        assert refused.json()["error"]["message"].startswith("orch gateway: budget exceeded")
        bad = call(gw.base("not-a-token") + "/responses", _responses_call(script))
        assert bad.status == 401 and bad.json()["error"]["code"] == "invalid_api_key"


def test_replay_of_a_responses_conversation(tmp_path: Path) -> None:
    script = '```orch-script\n{"bash": "echo hi"}\n{"reply": "Finished."}\n```'
    live = tmp_path / "live"
    live.mkdir()
    with gateway(live) as gw:
        token = gw.client.mint_token(1)
        first = call(gw.base(token) + "/responses", _responses_call(script))
        recorded = read_exchanges(settled(gw).exchanges(1))
    replay_dir = tmp_path / "replayed"
    (replay_dir / "run").mkdir(parents=True)
    with gateway(replay_dir, boot_for(replay_dir / "run", None, replay=str(live / "run"))) as rp:
        token = rp.client.mint_token(1)
        again = call(rp.base(token) + "/responses", _responses_call(script))
        assert again.status == 200 and again.body.decode() == recorded[0].body == first.body.decode()
        miss = call(rp.base(token) + "/responses", _responses_call("never recorded"))
        assert miss.status == 400 and miss.json()["error"]["message"].startswith("orch gateway: replay: ")


def test_replay_translates_a_recorded_stream_into_this_runs_folders() -> None:
    old = "/tmp/cx/orchhome/runs/cx1"
    sse = TOOL_TURN["response_sse"]
    assert old in sse
    moved = translate(
        Exchange.model_validate(
            {"seq": 1, "ts": 0, "worker": 1, "method": "POST", "path": "/responses", "request": {}, "status": 200,
             "stream": True, "body": sse, "key": {"kind": "main", "conversation": "c", "turn": 1}}
        ),
        (("/tmp/cx/orchhome/runs/cx1", "/srv/new-run"),),
    ).body  # fmt: skip
    assert old not in moved and "/srv/new-run/outbox/agent-1/result.md" in moved
    outcome = _outcome(moved, 64)
    assert outcome.complete and "/srv/new-run/outbox/agent-1" in outcome.tool_uses[0].input["cmd"]
    unchanged = [e for e in sse.split("\n\n") if old not in e]
    assert all(e in moved.split("\n\n") for e in unchanged)  # the rest byte for byte


UNCANONICAL = ["/x/../responses", "//responses", "/%72esponses", "/v1/./messages", "/responses/"]


def test_a_worker_cannot_reach_an_endpoint_by_a_path_the_gateway_does_not_count(tmp_path: Path) -> None:
    """A lying worker: a path the upstream resolves to /responses or /v1/messages, which the gateway would
    otherwise forward uncounted, uncapped and unledgered. One gateway for every path (a start each was most of
    the time): each refusal is one more event, and nothing is ever recorded."""
    with gateway(tmp_path) as gw:
        token = gw.client.mint_token(1)
        for n, path in enumerate(UNCANONICAL, 1):
            reply = call(gw.base(token) + path, _responses_call("hi"))
            assert reply.status == 400 and reply.json()["error"]["message"].endswith("is not canonical"), path
            assert not gw.folder.exchanges(1).exists(), path
            refused = [e for e in events_of(gw.folder) if e["event"] == "malformed-request"]
            assert len(refused) == n, path

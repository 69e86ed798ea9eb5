"""OpenAI Chat Completions in the gateway and the scripted model, on request bodies opencode 1.18.33 really
sent (tests/gateway/apis/data/opencode-chat.json, recorded by the gateway) and on a real gateway."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orch.contracts import TEXT_SHELL
from orch.gateway.apis.anthropic import AnthropicProtocol
from orch.gateway.apis.openai_chat import ChatCompletionsProtocol, text_shell_calls
from orch.gateway.apis.registry import for_path
from orch.gateway.modeldir import Scheme, Tokens
from orch.gateway.recording.keys import exchange_key
from orch.offline.apis.openai_chat import neutral_messages, offered_call
from orch.offline.script import next_answer
from orch.sse import SseParser
from tests.gateway.gw import boot_for, call, gateway, ledger_of, main_call, script_prompt, settled, usage_of

PROTOCOL = ChatCompletionsProtocol()
CAPTURED: dict[str, Any] = json.loads((Path(__file__).parent / "data" / "opencode-chat.json").read_text())
MAIN, TITLE = CAPTURED["main"], CAPTURED["title"]


def _read(stream: bytes, size: int) -> Any:
    parser, reader = SseParser(), PROTOCOL.stream_reader({})
    for i in range(0, len(stream), size):
        for event in parser.feed(stream[i : i + size]):
            reader.feed(event)
    return reader.outcome()


@pytest.mark.parametrize("size", [1, 13, 200, 1 << 20])
def test_stream_tool_call_usage_and_end_whatever_the_chunking(size: int) -> None:
    outcome = _read(MAIN["response"].encode(), size)
    assert outcome.complete and outcome.model == "gpt-4.1"
    (use,) = outcome.tool_uses
    assert use.name == "write" and use.id.startswith("call_")
    assert use.input["content"] == "# Result of worker 1\nall good\n"
    assert use.input["filePath"].endswith("/outbox/agent-1/result.md")
    assert outcome.usage is not None and outcome.usage.output_tokens > 0 and outcome.usage.input_tokens > 0


def test_a_stream_cut_before_its_finish_is_incomplete() -> None:
    cut = MAIN["response"].encode()
    cut = cut[: cut.index(b'"finish_reason": "tool_calls"')]
    assert not _read(cut, 1 << 20).complete


def test_tool_results_and_keys_of_opencodes_requests() -> None:
    results = PROTOCOL.tool_results(MAIN["request"])
    assert len(results) == 2 and all(r.tool_use_id.startswith("call_") for r in results)
    assert "<path>" in results[0].text and "orch-script" in results[0].text  # the brief it read
    assert exchange_key(MAIN["path"], MAIN["request"], "/r", "/w").kind == "main"
    assert exchange_key(TITLE["path"], TITLE["request"], "/r", "/w").kind == "side"  # titles offer no tools
    assert PROTOCOL.model(MAIN["request"]) == "gpt-4.1"


def test_usage_keeps_cached_tokens_apart_and_json_bodies() -> None:
    body = {
        "model": "gpt-4.1",
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{"}}],
                }
            }
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 60}},
    }
    outcome = PROTOCOL.response_outcome(body)
    assert outcome.usage == Tokens(input_tokens=40, output_tokens=7, cache_read_input_tokens=60)
    assert [(t.id, t.name, t.input) for t in outcome.tool_uses] == [("c1", "bash", {"_unparsed": "{"})]


def test_routing_auth_and_errors() -> None:
    assert for_path("/chat/completions").name == for_path("/v1/chat/completions?x=1").name == "openai-chat"
    assert for_path("/v1/messages").name == AnthropicProtocol().name
    assert PROTOCOL.kind("GET", "/models") == "other" and not PROTOCOL.billable("GET", "/models")
    assert PROTOCOL.upstream_auth(Scheme.BEARER, "sk-x", {"authorization": "Bearer worker"}) == {
        "authorization": "Bearer sk-x"
    }
    assert PROTOCOL.upstream_auth(Scheme.NONE, "", {"authorization": "Bearer worker"}) == {}
    assert "authorization" in PROTOCOL.auth_headers  # the worker's token never goes upstream
    assert PROTOCOL.error_body("authentication", "no")["error"]["message"] == "no"


def test_the_scripted_model_reads_opencodes_history() -> None:
    """The captured turn followed a read of the brief and a bash call: the script's next step is the write,
    in opencode's own tool and argument names."""
    answer = next_answer(neutral_messages(MAIN["request"]["messages"]))
    assert answer.kind == "tool" and answer.tool == "Write"
    name, args = offered_call(answer, MAIN["request"]["tools"])
    assert name == "write" and args["filePath"].endswith("result.md") and "file_path" not in args


def _chat(text: str, **extra: Any) -> dict[str, Any]:
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"properties": {"command": {}}}}}]
    return {
        "model": "gpt-4.1",
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": tools,
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}],
        **extra,
    }


def test_a_gateway_serves_chat_completions_beside_the_messages_api(tmp_path: Path) -> None:
    script = script_prompt({"bash": "echo hi"}, {"reply": "Finished."})
    with gateway(tmp_path) as gw:
        token = gw.client.mint_token(1)
        first = call(gw.base(token) + "/chat/completions", _chat(script), headers={"authorization": f"Bearer {token}"})
        assert first.status == 200 and first.headers["content-type"].startswith("text/event-stream")
        chunks = [json.loads(line[6:]) for line in first.body.decode().splitlines() if line.startswith("data: {")]
        assert first.body.decode().rstrip().endswith("data: [DONE]")
        tool = chunks[1]["choices"][0]["delta"]["tool_calls"][0]
        assert tool["function"]["name"] == "bash"
        second = _chat(script)
        second["messages"] += [
            {"role": "assistant", "content": None, "tool_calls": [{**tool, "function": {"name": "bash",
             "arguments": '{"command": "echo hi"}'}}]},
            {"role": "tool", "tool_call_id": tool["id"], "content": "hi\n"},
        ]  # fmt: skip
        reply = call(gw.base(token) + "/chat/completions", second)
        assert "Finished." in reply.body.decode()
        # The Messages API in the same gateway, same worker.
        assert call(gw.base(token) + "/v1/messages", main_call("hello")).status == 200
        usage = usage_of(settled(gw))["workers"]["1"]
        assert usage["requests"] == 3 and set(usage["by_model"]) == {"gpt-4.1", "claude-sonnet-4-5-20250929"}
        assert usage["by_model"]["gpt-4.1"]["output_tokens"] > 0
        ledger = ledger_of(settled(gw))
        assert [(e["kind"], e["tool"]) for e in ledger] == [("tool_use", "bash"), ("tool_result", None)]
        assert ledger[1]["output"] == "hi\n"
        # A lying worker: an unknown token, or a body that is not JSON, is refused in the chat shape.
        bad = call(f"{gw.handle.url}/t/not-a-token/chat/completions", _chat("x"))
        assert bad.status == 401
        garbage = call(gw.base(token) + "/chat/completions", raw=b"{not json")
        assert garbage.status == 400 and "malformed" in garbage.json()["error"]["message"]


def test_a_stream_that_asks_no_usage_is_made_to() -> None:
    """aider 0.86.2 streams without stream_options: the gateway asks for usage upstream, or it could not count."""
    body = {"model": "gpt-4.1", "stream": True, "messages": []}
    sent = json.loads(PROTOCOL.upstream_body(body, json.dumps(body).encode()))
    assert sent["stream_options"] == {"include_usage": True} and sent["messages"] == []
    raw = json.dumps(MAIN["request"]).encode()
    assert PROTOCOL.upstream_body(MAIN["request"], raw) is raw  # opencode asks already: bytes untouched
    plain = {"model": "gpt-4.1", "messages": []}
    assert PROTOCOL.upstream_body(plain, b"x") == b"x"


WRITE = [
    {"type": "function", "function": {"name": "write", "parameters": {"properties": {"filePath": {}, "content": {}}}}}
]


def _write_call(run_root: Path) -> dict[str, Any]:
    step = {"write": str(run_root / "outbox" / "result.md"), "content": "x"}
    return _chat(script_prompt(step, {"reply": "Finished."}), tools=WRITE)


def _arguments(body: bytes) -> dict[str, Any]:
    outcome = _read(body, 1 << 20)
    assert outcome.complete and len(outcome.tool_uses) == 1
    return dict(outcome.tool_uses[0].input)


def test_replay_of_chat_completions_answers_in_this_runs_folders(tmp_path: Path) -> None:
    live = tmp_path / "live"
    live.mkdir()
    with gateway(live) as gw:
        token = gw.client.mint_token(1)
        recorded = call(gw.base(token) + "/chat/completions", _write_call(gw.folder.root))
        assert _arguments(recorded.body)["filePath"] == str(gw.folder.root / "outbox" / "result.md")
    replay_dir = tmp_path / "replayed"
    (replay_dir / "run").mkdir(parents=True)
    boot = boot_for(replay_dir / "run", None, replay=str(live / "run"))
    with gateway(replay_dir, boot) as rp:
        token = rp.client.mint_token(1)
        reply = call(rp.base(token) + "/chat/completions", _write_call(rp.folder.root))
        assert reply.status == 200, reply.body
        # The recorded Write pointed into the recording's run folder: replayed, it points into this one.
        assert _arguments(reply.body)["filePath"] == str(rp.folder.root / "outbox" / "result.md")
        assert usage_of(settled(rp))["workers"]["1"]["requests"] == 1


def test_aiders_shell_block_lines_are_ledgered_as_text_shell_calls() -> None:
    """aider offers no tools: it runs each line of its answers' fenced shell blocks, so the gateway ledgers
    those lines as the calls they are; an edit block's fence, comments and blank lines are not commands."""
    text = (
        "orch step: Bash\n```bash\norch bus post r --as 1 hi ; touch /r/done\n\n# a comment\necho two\n```\n"
        "notes.md\n```\n<<<<<<< SEARCH\n=======\necho not a command\n>>>>>>> REPLACE\n```\n"
        "```sh\nls\n```\nand ```python\nprint(1)\n```\n"
    )
    uses = text_shell_calls(text, "chatcmpl-1")
    assert [(u.id, u.name, u.input) for u in uses] == [
        ("chatcmpl-1:0", TEXT_SHELL, {"command": "orch bus post r --as 1 hi ; touch /r/done"}),
        ("chatcmpl-1:1", TEXT_SHELL, {"command": "echo two"}),
        ("chatcmpl-1:2", TEXT_SHELL, {"command": "ls"}),
    ]
    aider = {"stream": True, "messages": [{"role": "system", "content": "Use SEARCH/REPLACE blocks."}]}
    chunks = [
        {"id": "chatcmpl-9", "choices": [{"index": 0, "delta": {"content": "```bash\necho "}}]},
        {"id": "chatcmpl-9", "choices": [{"index": 0, "delta": {"content": "hi\n```\n"}, "finish_reason": "stop"}]},
    ]
    for body, expected in ((aider, [("chatcmpl-9:0", "echo hi")]), ({**aider, "tools": [{"type": "function"}]}, [])):
        reader = PROTOCOL.stream_reader(body)
        for chunk in chunks:
            reader.feed(chunk)
        assert [(u.id, u.input["command"]) for u in reader.outcome().tool_uses] == expected

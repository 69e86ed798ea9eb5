"""Every model API through both registries (orch/gateway/apis/registry.py, orch/offline/apis/registry.py): one shared
suite, so a fifth API is one gateway module, one offline module, a line in each registry and a CASES entry
here. The scripted model's answers are read back by the gateway's own protocol, live and replayed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from orch.gateway.apis import registry as protocols
from orch.gateway.apis.base import ApiProtocol, Outcome
from orch.offline.apis import registry as apis
from orch.sse import SseParser

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

OLD, NEW = "/old/run/folder", "/srv/new-run"


@dataclass(frozen=True)
class Case:
    path: str
    main: dict[str, Any]
    """A streamed main turn whose script's first step is a Write into OLD."""
    side: dict[str, Any]
    """A side call (a title)."""


SCRIPT = f'```orch-script\n{{"write": "{OLD}/out.md", "content": "in {OLD}"}}\n{{"reply": "done"}}\n```'
CASES = {
    "anthropic": Case(
        "/v1/messages",
        {"model": "m", "stream": True, "tools": [{"name": "Write"}], "messages": [{"role": "user", "content": SCRIPT}]},
        {"model": "m", "stream": True, "messages": [{"role": "user", "content": "title?"}]},
    ),
    "openai-responses": Case(
        "/responses",
        {"model": "m", "stream": True, "tools": [{"type": "function", "name": "exec_command"}],
         "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": SCRIPT}]}]},
        {"model": "m", "stream": True, "input": [{"type": "message", "role": "user", "content": "title?"}]},
    ),
    "openai-chat": Case(
        "/chat/completions",
        {"model": "m", "stream": True, "stream_options": {"include_usage": True},
         "tools": [{"type": "function", "function": {"name": "write", "parameters": {"properties": {"filePath": {}}}}}],
         "messages": [{"role": "user", "content": SCRIPT}]},
        {"model": "m", "stream": True, "messages": [{"role": "user", "content": "title?"}]},
    ),
    "gemini": Case(
        "/v1beta/models/m:streamGenerateContent",
        {"tools": [{"functionDeclarations": [{"name": "write_file"}]}],
         "contents": [{"role": "user", "parts": [{"text": SCRIPT}]}]},
        {"contents": [{"role": "user", "parts": [{"text": "title?"}]}]},
    ),
}  # fmt: skip
NAMES = sorted(CASES)


def read(protocol: ApiProtocol, body: dict[str, Any], data: bytes, streamed: bool) -> Outcome:
    if not streamed:
        return protocol.response_outcome(json.loads(data))
    parser, reader = SseParser(), protocol.stream_reader(body)
    for event in parser.feed(data):
        reader.feed(event)
    return reader.outcome()


def test_both_registries_name_the_same_apis() -> None:
    assert sorted(protocols.BY_NAME) == sorted(apis.BY_NAME) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_each_api_claims_its_paths_in_both_registries(name: str) -> None:
    path = CASES[name].path
    claimed, offline = protocols.claiming(path), apis.for_path(path)
    assert claimed is not None and offline is not None
    assert claimed.name == offline.name == name


@pytest.mark.parametrize("name", NAMES)
def test_the_scripted_answer_reads_back_as_a_complete_tool_call(name: str) -> None:
    case, protocol = CASES[name], protocols.BY_NAME[name]
    reply = apis.BY_NAME[name].answer(case.path, case.main, json.dumps(case.main).encode())
    assert reply.status == 200 and reply.content_type == "text/event-stream" and reply.step == "Write"
    outcome = read(protocol, case.main, reply.body, True)
    assert outcome.complete and outcome.usage is not None and len(outcome.tool_uses) == 1
    assert OLD in json.dumps(outcome.tool_uses[0].input)
    key = protocol.replay_parts(case.path, case.main)
    assert key.kind == "main" and "orch-script" in key.first_text


@pytest.mark.parametrize("name", NAMES)
def test_a_recorded_answer_is_translated_into_this_runs_folders(name: str) -> None:
    case, protocol = CASES[name], protocols.BY_NAME[name]
    recorded = apis.BY_NAME[name].answer(case.path, case.main, b"{}").body.decode()
    moved = protocol.translate_stream(recorded, lambda text: text.replace(OLD, NEW))
    outcome = read(protocol, case.main, moved.encode(), True)
    assert OLD not in moved and outcome.complete and NEW in json.dumps(outcome.tool_uses[0].input)
    assert protocol.translate_stream(recorded, lambda text: text) == recorded  # untouched: byte for byte


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("streamed", [True, False])
def test_side_calls_take_no_step_and_a_synthesised_answer_is_the_apis_own(name: str, streamed: bool) -> None:
    case, protocol = CASES[name], protocols.BY_NAME[name]
    side = {**case.side, "stream": streamed} if "stream" in case.side else case.side
    path = case.path if streamed or name != "gemini" else case.path.replace("streamGenerateContent", "generateContent")
    reply = apis.BY_NAME[name].answer(path, side, json.dumps(side).encode())
    assert reply.status == 200 and reply.step == "side"
    assert protocol.replay_parts(path, side).kind == "side"
    answer = protocol.synthesised(path, side, "side", "tag")
    assert answer.stream == streamed
    assert read(protocol, side, answer.text.encode(), streamed).complete

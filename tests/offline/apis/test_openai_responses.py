"""The scripted model's Responses API side (orch.offline.apis.openai_responses): pure translation both ways, and the
HTTP server answering /responses as Codex CLI expects."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orch.offline.apis import openai_responses as responses
from orch.offline.modelserver import ScriptedModelServer
from orch.offline.script import Answer
from tests.gateway.gw import call

CAPTURED: dict[str, Any] = json.loads(
    (Path(__file__).parents[2] / "gateway" / "apis" / "data" / "codex-responses.json").read_text()
)


@pytest.mark.parametrize("content", ["", "plain\n", 'it\'s $HOME `x` "q"\n\nEOF\n', "ünïcode ✓ no newline", "x" * 5000])
def test_write_runs_in_a_shell_and_reads_back_as_write(tmp_path: Path, content: str) -> None:
    target = tmp_path / "a dir" / "it's.md"
    move = Answer("tool", tool="Write", tool_input={"file_path": str(target), "content": content}, step="Write")
    cmd = responses.shell_command(move)
    subprocess.run(["bash", "-c", cmd], check=True)
    assert target.read_text() == content  # exact bytes, whatever they are
    assert responses.neutral_call("exec_command", json.dumps({"cmd": cmd})) == (
        "Write",
        {"file_path": str(target), "content": content},
    )


def test_read_bash_and_other_calls_read_back() -> None:
    read = responses.shell_command(Answer("tool", tool="Read", tool_input={"file_path": "/r/a b.md"}))
    assert responses.neutral_call("exec_command", json.dumps({"cmd": read})) == ("Read", {"file_path": "/r/a b.md"})
    assert responses.neutral_call("exec_command", '{"cmd": "cat -- a b"}') == ("Bash", {"command": "cat -- a b"})
    fake = "mkdir -p -- /x && printf %s !!! | base64 -d > /x/y"  # not base64: stays a Bash call
    assert responses.neutral_call("exec_command", json.dumps({"cmd": fake}))[0] == "Bash"
    assert responses.neutral_call("exec_command", "not json") == ("exec_command", {"_unparsed": "not json"})
    assert responses.neutral_call("view_image", '{"path": "/p"}') == ("view_image", {"path": "/p"})


def test_captured_request_as_neutral_history() -> None:
    messages = responses.to_messages(CAPTURED["tool_turn"]["request"]["input"])
    # The boot prompt and its reply, the pointer to the brief, then two tool calls and their results.
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user", "assistant", "user"]
    first = messages[0]["content"][0]["text"]
    assert first.startswith("You are a worker in an orch fleet")  # Codex's injected context is left out
    assert "agent-1.task.md" in messages[2]["content"][0]["text"]
    assert messages[3]["content"][0]["name"] == "Read"  # the brief's cat, recognised
    assert messages[4]["content"][0]["type"] == "tool_result"
    assert messages[5]["content"][0]["input"]["command"].startswith("orch bus post")
    assert responses.answer(CAPTURED["title"]["request"]).step == "side"
    assert json.loads(responses.answer(CAPTURED["title"]["request"]).text) == {"title": "Scripted session"}


def test_a_brief_is_read_then_its_script_runs() -> None:
    def request(*items: dict[str, Any]) -> dict[str, Any]:
        prompt = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Follow /r/brief.md"}]}
        return {"tools": [{"type": "function", "name": "exec_command"}], "input": [prompt, *items]}

    first = responses.answer(request())
    assert (first.tool, first.tool_input) == ("Read", {"file_path": "/r/brief.md"})
    call = responses.output_item(first)
    brief = '```orch-script\n{"bash": "echo hi"}\n```'
    output = {"type": "function_call_output", "call_id": call["call_id"], "output": f"Output:\n{brief}"}
    second = responses.answer(request(call, output))
    assert second.step == "Bash" and responses.shell_command(second) == "echo hi"
    done = responses.answer(request(call, output, responses.output_item(second)))
    assert done.text == "Done."


def test_the_server_streams_what_codex_reads() -> None:
    script = '```orch-script\n{"write": "/tmp/x.md", "content": "hi"}\n{"fail": "rate_limit"}\n```'
    prompt = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": script}]}
    body: dict[str, Any] = {
        "model": "gpt-5.5",
        "stream": True,
        "tools": [{"type": "function", "name": "exec_command"}],
        "input": [prompt],
    }
    with ScriptedModelServer() as server:
        reply = call(server.url + "/v1/responses", body)
        events = reply.events()
        assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        item = events[-1]["response"]["output"][0]
        cmd = json.loads(item["arguments"])["cmd"]
        assert base64.b64encode(b"hi").decode() in cmd
        assert events[-1]["response"]["usage"]["input_tokens"] > 0
        result = {"type": "function_call_output", "call_id": item["call_id"], "output": ""}
        failed = call(server.url + "/responses", {**body, "input": [prompt, item, result]})
        assert failed.status == 429 and failed.json()["error"]["type"] == "rate_limit_exceeded"
        assert [r.step for r in server.requests] == ["Write", "fail:rate_limit"]
        assert server.requests[0].prompt == script

"""The scripted model in the OpenAI Responses API (`POST /responses`), as the pinned Codex CLI calls it.

Pure, like orch.offline.script: a request body in, the answer's JSON out. The script logic stays in
script.py, which reads a neutral message history (Anthropic-shaped: user/assistant turns, tool_use and
tool_result blocks). This module translates both ways:

- the request's `input` items become that history: user messages (minus the context Codex injects,
  such as `<environment_context>` and AGENTS.md), `function_call` items as tool_use blocks,
  `function_call_output` items as tool_result blocks;
- a scripted step becomes one `exec_command` function call (the pinned Codex's only shell tool):
  `bash` runs the command, `write` decodes the content from base64 into the file (exact bytes, any
  content), `read` is `cat -- PATH`. Reading a call back, those two shapes are recognised as Write and
  Read again, so the script can tell a brief's Read from any other command.

A side call (no tools offered, or a JSON output format asked for: Codex's thread titles) gets a
short text or a sample of the schema and never advances the script.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from orch.jsonsample import sample_text
from orch.offline.apis.base import SIDE_TEXT, Reply, events_reply, json_reply, tokens
from orch.offline.script import Answer, Message, next_answer

PATHS = ("/responses", "/v1/responses")
SHELL_TOOL = "exec_command"
SCRIPTED_TOOLS = ("Bash", "Write", "Read")
_WRITE_RE = re.compile(
    r"^mkdir -p -- (?P<dir>'[^']*'|\S+) && printf %s (?P<b64>[A-Za-z0-9+/=]*) \| base64 -d > (?P<path>.+)$"
)
FAILURES = {
    "rate_limit": (429, "Scripted rate limit"),
    "overloaded": (529, "Scripted overload"),
    "authentication": (401, "Scripted authentication failure"),
}
# What Codex puts into the conversation as user messages that nobody typed.
_INJECTED = ("<environment_context>", "<user_instructions>", "<turn_aborted>", "# AGENTS.md instructions")


def shell_command(answer: Answer) -> str:
    """The exec_command `cmd` that carries out a scripted tool step."""
    if answer.tool == "Write":
        path = str(answer.tool_input.get("file_path", ""))
        data = base64.b64encode(str(answer.tool_input.get("content", "")).encode()).decode()
        folder = path.rsplit("/", 1)[0] or "/"
        return f"mkdir -p -- {shlex.quote(folder)} && printf %s {data} | base64 -d > {shlex.quote(path)}"
    if answer.tool == "Read":
        return f"cat -- {shlex.quote(str(answer.tool_input.get('file_path', '')))}"
    return str(answer.tool_input.get("command", ""))


def neutral_call(name: str, arguments: str) -> tuple[str, dict[str, Any]]:
    """A function call as the script's tool name and input (Bash, Write, Read, or the call as it came)."""
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        return name, {"_unparsed": arguments}
    if not isinstance(args, dict):
        return name, {}
    if name != SHELL_TOOL:
        return name, args
    cmd = str(args.get("cmd", ""))
    if match := _WRITE_RE.match(cmd):
        try:
            (path,) = shlex.split(match["path"])
            content = base64.b64decode(match["b64"]).decode()
        except (ValueError, UnicodeDecodeError):
            return "Bash", {"command": cmd}
        return "Write", {"file_path": path, "content": content}
    try:
        words = shlex.split(cmd)
    except ValueError:
        words = []
    if len(words) == 3 and words[:2] == ["cat", "--"]:
        return "Read", {"file_path": words[2]}
    return "Bash", {"command": cmd}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = [str(c.get("text", "")) for c in content or [] if isinstance(c, dict) and "text" in c]
    return "\n".join(parts)


def to_messages(items: Any) -> list[Message]:
    """The request's `input` as the neutral history orch.offline.script reads."""
    messages: list[Message] = []

    def add(role: str, block: dict[str, Any]) -> None:
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].append(block)
        else:
            messages.append({"role": role, "content": [block]})

    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") == "user":
            text = _text(item.get("content")).strip()
            if text and not text.startswith(_INJECTED):
                add("user", {"type": "text", "text": text})
        elif kind == "message" and item.get("role") == "assistant":
            add("assistant", {"type": "text", "text": _text(item.get("content"))})
        elif kind == "function_call":
            name, tool_input = neutral_call(str(item.get("name", "")), str(item.get("arguments", "")))
            call_id = str(item.get("call_id", ""))
            add("assistant", {"type": "tool_use", "id": call_id, "name": name, "input": tool_input})
        elif kind == "function_call_output":
            output = item.get("output")
            add("user", {"type": "tool_result", "tool_use_id": str(item.get("call_id", "")), "content": _text(output)})
    return messages


def answer(body: Mapping[str, Any]) -> Answer:
    """The next move for a /responses request."""
    text_format = (body.get("text") or {}).get("format") if isinstance(body.get("text"), dict) else None
    schema = text_format.get("schema") if isinstance(text_format, dict) else None
    if not body.get("tools") or schema is not None:
        return Answer("text", text=sample_text(schema or None, SIDE_TEXT), step="side")
    return next_answer(to_messages(body.get("input")))


def prompt(body: Mapping[str, Any]) -> str | None:
    """The latest typed prompt of the request (for the request log)."""
    for message in reversed(to_messages(body.get("input"))):
        if message["role"] == "user":
            texts = [b["text"] for b in message["content"] if b.get("type") == "text"]
            if texts:
                return "\n".join(texts)
    return None


def output_item(move: Answer) -> dict[str, Any]:
    """The one output item of a text or tool answer."""
    if move.kind == "tool":
        # A script's `tool` step (any other name) goes out as that function call with its input as given.
        scripted = move.tool in SCRIPTED_TOOLS
        return {
            "type": "function_call",
            "id": f"fc_{uuid.uuid4().hex}",
            "call_id": f"call_{uuid.uuid4().hex}",
            "name": SHELL_TOOL if scripted else move.tool,
            "arguments": json.dumps({"cmd": shell_command(move)} if scripted else move.tool_input),
            "status": "completed",
        }
    return {
        "type": "message",
        "id": f"msg_{uuid.uuid4().hex}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": move.text, "annotations": []}],
    }


def usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def response(model: str, item: dict[str, Any], used: dict[str, Any], status: str = "completed") -> dict[str, Any]:
    return {
        "id": f"resp_{uuid.uuid4().hex}",
        "object": "response",
        "status": status,
        "model": model,
        "output": [item] if status == "completed" else [],
        "usage": used if status == "completed" else None,
    }


def stream_events(done: dict[str, Any]) -> list[dict[str, Any]]:
    """The SSE events of a completed response, as the API streams one (Codex reads output_item.done and
    response.completed; the deltas are what its TUI shows while text arrives)."""
    (item,) = done["output"]
    started = {**done, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": started},
        {"type": "response.in_progress", "response": started},
    ]
    if item["type"] == "message":
        text = item["content"][0]["text"]
        events += [
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {**item, "status": "in_progress", "content": []},
            },
            {
                "type": "response.output_text.delta",
                "item_id": item["id"],
                "output_index": 0,
                "content_index": 0,
                "delta": text,
            },
        ]
    else:
        events += [
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {**item, "status": "in_progress", "arguments": ""},
            },
            {
                "type": "response.function_call_arguments.delta",
                "item_id": item["id"],
                "output_index": 0,
                "delta": item["arguments"],
            },
        ]
    events += [
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": done},
    ]
    return [{**event, "sequence_number": number} for number, event in enumerate(events)]


def error(status: int, message: str) -> dict[str, Any]:
    kinds = {401: "invalid_request_error", 404: "invalid_request_error", 429: "rate_limit_exceeded"}
    return {"error": {"message": message, "type": kinds.get(status, "server_error"), "param": None, "code": None}}


class ResponsesApi:
    name = "openai-responses"

    def handles(self, path: str) -> bool:
        return path in PATHS

    def answer(self, path: str, body: Mapping[str, Any], raw: bytes) -> Reply:
        move = answer(body)
        if move.kind == "fail":
            status, message = FAILURES.get(move.text, (500, "Scripted API error"))
            reply = json_reply(status, error(status, message), move.step, {"x-should-retry": "false"})
        else:
            item = output_item(move)
            done = response(str(body.get("model") or "scripted"), item, {})
            done["usage"] = usage(tokens(raw.decode(errors="replace")), tokens(json.dumps(item)))
            reply = (
                events_reply(stream_events(done), move.step, named=True)
                if body.get("stream")
                else json_reply(200, done, move.step)
            )
        model = body.get("model")
        return replace(
            reply, model=model if isinstance(model, str) else None, stream=bool(body.get("stream")), prompt=prompt(body)
        )

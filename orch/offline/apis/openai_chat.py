"""The scripted model's OpenAI Chat Completions side (`POST /v1/chat/completions`, `POST /chat/completions`).

The script logic stays in orch.offline.script, which reads a message history in the Messages API's
shape. This module translates: a Chat Completions history into that shape (assistant `tool_calls` become
`tool_use` blocks, `role: tool` messages become `tool_result` blocks), and the script's next answer
back into a chat completion, streamed as `chat.completion.chunk` events with `tool_calls` deltas and a
final usage chunk, then `data: [DONE]`.

Tool names and argument names differ per agent (opencode offers `bash`, `write`, `read` with
`filePath`; Claude Code's are `Bash`, `Write`, `Read` with `file_path`). The script speaks Claude Code's
names; `offered_call` picks the offered tool whose name matches without case and renames `file_path`
to whatever path argument that tool's schema has.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from orch import sse
from orch.offline import aider
from orch.offline.apis.base import SIDE_TEXT, Reply, json_reply, stream_reply, tokens
from orch.offline.script import Answer, next_answer, prompt_text

PATH_KEYS = ("file_path", "filePath", "path")
NEUTRAL_NAMES = {"bash": "Bash", "write": "Write", "read": "Read"}
FAILURES = {
    "rate_limit": (429, "rate_limit_exceeded", "Scripted rate limit"),
    "overloaded": (503, "server_error", "Scripted overload"),
    "authentication": (401, "invalid_api_key", "Scripted authentication failure"),
}


PATHS = ("/v1/chat/completions", "/chat/completions")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _neutral_input(arguments: Any) -> dict[str, Any]:
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return {}
    if not isinstance(parsed, dict):
        return {}
    out = dict(parsed)
    for key in PATH_KEYS[1:]:
        if key in out and "file_path" not in out:
            out["file_path"] = out.pop(key)
    return out


def neutral_messages(messages: list[Any]) -> list[dict[str, Any]]:
    """A Chat Completions history in the Messages API's shape (system turns dropped), for script.py."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role == "user":
            out.append({"role": "user", "content": _text(message.get("content"))})
        elif role == "assistant":
            blocks: list[dict[str, Any]] = []
            if text := _text(message.get("content")):
                blocks.append({"type": "text", "text": text})
            for call in message.get("tool_calls") or []:
                if not isinstance(call, dict) or not isinstance(function := call.get("function"), dict):
                    continue
                name = str(function.get("name", ""))
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": str(call.get("id", "")),
                        "name": NEUTRAL_NAMES.get(name.lower(), name),
                        "input": _neutral_input(function.get("arguments")),
                    }
                )
            out.append({"role": "assistant", "content": blocks})
        elif role == "tool":
            result = {
                "type": "tool_result",
                "tool_use_id": str(message.get("tool_call_id", "")),
                "content": _text(message.get("content")),
            }
            # Consecutive results belong to one user turn, as in the Messages API.
            last = out[-1] if out else None
            if last and last["role"] == "user" and isinstance(last["content"], list):
                last["content"].append(result)
            else:
                out.append({"role": "user", "content": [result]})
    return out


def _offered(tools: Any) -> dict[str, dict[str, Any]]:
    """Offered function tools by lower-case name: (name, parameter properties)."""
    found: dict[str, dict[str, Any]] = {}
    for tool in tools or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(name := function.get("name"), str):
            params = function.get("parameters")
            props = params.get("properties") if isinstance(params, dict) else None
            found[name.lower()] = {"name": name, "properties": props if isinstance(props, dict) else {}}
    return found


def offered_call(answer: Answer, tools: Any) -> tuple[str, dict[str, Any]]:
    """The script's tool call as the agent's own tool: its name and argument names."""
    tool = _offered(tools).get(answer.tool.lower())
    if tool is None:
        return answer.tool, answer.tool_input
    args = dict(answer.tool_input)
    if "file_path" in args:
        key = next((k for k in PATH_KEYS if k in tool["properties"]), "file_path")
        args[key] = args.pop("file_path")
    return str(tool["name"]), args


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": code, "param": None, "code": code}}


def _usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": input_tokens,
        "completion_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


def completion(answer: Answer, body: Mapping[str, Any], input_tokens: int) -> dict[str, Any]:
    """A non-streamed chat completion for a text or tool answer."""
    message: dict[str, Any] = {"role": "assistant", "content": answer.text or None}
    finish = "stop"
    if answer.kind == "tool":
        name, args = offered_call(answer, body.get("tools"))
        message = {"role": "assistant", "content": None, "tool_calls": [_call(name, args)]}
        finish = "tool_calls"
    output_tokens = max(1, len(json.dumps(message)) // 4)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(body.get("model") or "scripted"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": _usage(input_tokens, output_tokens),
    }


def _call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    # Unique ids: an agent that sees one id twice may merge or replay the call.
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def stream_events(answer: Answer, body: Mapping[str, Any], input_tokens: int) -> bytes:
    """The answer as a chat.completion.chunk SSE stream, usage last, then [DONE]."""
    base = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": str(body.get("model") or "scripted"),
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    if answer.kind == "tool":
        name, args = offered_call(answer, body.get("tools"))
        call = _call(name, args)
        payload = call["function"]["arguments"]
        half = len(payload) // 2  # two fragments, as the real API streams arguments
        first = {"index": 0, "id": call["id"], "type": "function", "function": {"name": name, "arguments": ""}}
        chunks += [
            chunk({"tool_calls": [first]}),
            *(
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]})
                for p in (payload[:half], payload[half:])
            ),
            chunk({}, "tool_calls"),
        ]
        output_tokens = max(1, len(payload) // 4)
    else:
        chunks += [chunk({"content": answer.text}), chunk({}, "stop")]
        output_tokens = max(1, len(answer.text) // 4)
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        chunks.append({**base, "choices": [], "usage": _usage(input_tokens, output_tokens)})
    return sse.frame(chunks, done=True)


class ChatApi:
    """OpenAI Chat Completions (opencode; aider, whose answers are edit and shell blocks in one text:
    orch.offline.aider): the same script, translated both ways."""

    name = "openai-chat"

    def handles(self, path: str) -> bool:
        return path in PATHS

    def answer(self, path: str, body: Mapping[str, Any], raw: bytes) -> Reply:
        if aider.is_aider(body):  # no tools: the steps go out as edit and shell blocks in one text
            answer = aider.answer(body)
        elif not body.get("tools") or isinstance(body.get("response_format"), dict):
            answer = Answer("text", text=SIDE_TEXT, step="side")  # titles, summaries
        else:
            answer = next_answer(neutral_messages(body.get("messages") or []))
        input_tokens = tokens(raw.decode(errors="replace"))
        if answer.kind == "fail":
            status, code, message = FAILURES.get(answer.text, (500, "server_error", "Scripted API error"))
            reply = json_reply(status, error_body(code, message), answer.step, {"x-should-retry": "false"})
        elif not body.get("stream"):
            reply = json_reply(200, completion(answer, body, input_tokens), answer.step)
        else:
            reply = stream_reply(stream_events(answer, body, input_tokens), answer.step)
        listed = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        prompt = next((t for m in reversed(listed) if (t := prompt_text(m))), None)
        model = body.get("model")
        return replace(
            reply, model=model if isinstance(model, str) else None, stream=bool(body.get("stream")), prompt=prompt
        )

"""The scripted model over the Anthropic Messages API (`/v1/messages`, `/v1/messages/count_tokens`), as
Claude Code and orch's scripted agent call it. The script reads this API's message shape as it is.

Side calls (no tools offered, JSON output asked for, or not streamed: session titles, topic detection;
the pinned Claude Code streams these too) get a short text or a sample of the schema and never advance
the script. Streams come as the API sends them: a tool input in two partial-JSON fragments.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from orch.jsonsample import sample_text
from orch.offline.apis.base import SIDE_TEXT, Reply, events_reply, json_reply, tokens
from orch.offline.script import Answer, next_answer, prompt_text

PATHS = ("/v1/messages", "/v1/messages/count_tokens")
FAILURES = {
    "rate_limit": (429, "rate_limit_error", "Scripted rate limit"),
    "overloaded": (529, "overloaded_error", "Scripted overload"),
    "authentication": (401, "authentication_error", "Scripted authentication failure"),
}


def error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def _schema(body: Mapping[str, Any]) -> object:
    output = body.get("output_config")
    given = output.get("format") if isinstance(output, dict) else None
    return given.get("schema") if isinstance(given, dict) else None


def _stream_events(message: dict[str, Any], block: dict[str, Any], stop: str) -> list[dict[str, Any]]:
    start = {**block, "input": {}} if block["type"] == "tool_use" else {"type": "text", "text": ""}
    if block["type"] == "tool_use":
        payload = json.dumps(block["input"])
        half = len(payload) // 2  # two fragments, as the real API sends partial JSON
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in (payload[:half], payload[half:])]
    else:
        deltas = [{"type": "text_delta", "text": block["text"]}]
    usage = message["usage"]
    return [
        {"type": "message_start", "message": {**message, "content": [], "stop_reason": None,
                                              "usage": {**usage, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": start},
        {"type": "ping"},
        *({"type": "content_block_delta", "index": 0, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        },
        {"type": "message_stop"},
    ]  # fmt: skip


class AnthropicApi:
    name = "anthropic"

    def handles(self, path: str) -> bool:
        return path in PATHS

    def answer(self, path: str, body: Mapping[str, Any], raw: bytes) -> Reply:
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        model = body.get("model") if isinstance(body.get("model"), str) else None
        stream = bool(body.get("stream"))
        prompt = next((t for m in reversed(messages) if (t := prompt_text(m))), None)
        input_tokens = tokens(raw.decode(errors="replace"))
        if path == "/v1/messages/count_tokens":
            reply = json_reply(200, {"input_tokens": input_tokens}, "count_tokens")
        else:
            schema = _schema(body)
            if not stream or not body.get("tools") or schema is not None:
                answer = Answer("text", text=sample_text(schema, SIDE_TEXT), step="side")  # never a script step
            else:
                answer = next_answer(messages)
            reply = self._reply(answer, str(model or "scripted"), stream, input_tokens)
        return replace(reply, model=model, stream=stream, prompt=prompt)

    def _reply(self, answer: Answer, model: str, stream: bool, input_tokens: int) -> Reply:
        if answer.kind == "fail":
            status, kind, why = FAILURES.get(answer.text, (500, "api_error", "Scripted API error"))
            # Without x-should-retry the pinned Claude Code retries with backoff for minutes.
            headers = {"x-should-retry": "false"}
            if answer.retry_after is not None:
                headers["retry-after"] = f"{answer.retry_after:g}"
            return json_reply(status, error(kind, why), answer.step, headers)
        if answer.kind == "tool":
            block: dict[str, Any] = {
                "type": "tool_use",
                "id": f"toolu_{uuid.uuid4().hex}",
                "name": answer.tool,
                "input": answer.tool_input,
            }
            stop = "tool_use"
        else:
            block, stop = {"type": "text", "text": answer.text}, "end_turn"
        message: dict[str, Any] = {
            "id": f"msg_{uuid.uuid4().hex}",  # unique ids: Claude Code merges messages sharing one
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [block],
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {
                "input_tokens": input_tokens,
                "output_tokens": tokens(json.dumps(block)),
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        }
        if not stream:
            return json_reply(200, message, answer.step)
        return events_reply(_stream_events(message, block, stop), answer.step, named=True)

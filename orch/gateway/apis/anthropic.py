"""The Anthropic Messages API for the gateway: /v1/messages (JSON or SSE), /v1/messages/count_tokens;
anything else is passed through uncounted.

Replay: a main turn is streamed, offers tools and asks for no output format (Claude Code streams its side
calls too: session titles offer no tools and ask for a JSON format); the turn is the number of messages
(Claude Code's mid-conversation `system` turns count too, the same way in both runs).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from orch import sse
from orch.gateway.apis import base as api
from orch.gateway.apis.base import Outcome, ProtocolBase, StreamBase, ToolResult, ToolUse
from orch.gateway.modeldir import Scheme, Tokens
from orch.jsonsample import sample_text

OAUTH_BETA = "oauth-2025-04-20"
_ERROR_TYPES: dict[api.ErrorKind, str] = {
    "authentication": "authentication_error",
    "permission": "permission_error",
    "invalid_request": "invalid_request_error",
    "upstream": "api_error",
    "not_found": "not_found_error",
}
_USAGE_FIELDS = tuple(Tokens.model_fields)


def _tokens(usage: object, base: Tokens | None = None) -> Tokens | None:
    """Usage fields present in `usage` laid over `base` (message_delta repeats cumulative counts)."""
    if not isinstance(usage, dict):
        return base
    values = base.model_dump() if base is not None else {}
    for name in _USAGE_FIELDS:
        value = usage.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            values[name] = value
    return Tokens(**values)


def _tool_use(block: object) -> ToolUse | None:
    if not isinstance(block, dict) or block.get("type") != "tool_use":
        return None
    tool_input = block.get("input")
    return ToolUse(
        str(block.get("id", "")), str(block.get("name", "")), tool_input if isinstance(tool_input, dict) else {}
    )


def _text(content: object) -> str:
    """A message's or tool result's text; an image or document is its kind in brackets, not its bytes."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text") or ""))
        elif kind == "tool_result":
            parts.append(_text(block.get("content")))
        else:
            parts.append(f"[{kind}]")
    return "\n".join(parts)


def first_user_text(body: Mapping[str, Any]) -> str:
    """The raw text of the request's first user message ("" when it has none)."""
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and message.get("role") == "user":
            return _text(message.get("content"))
    return ""


def turn_of(body: Mapping[str, Any]) -> int:
    messages = body.get("messages")
    return len(messages) if isinstance(messages, list) else 0


def _schema(body: Mapping[str, Any]) -> object:
    """The JSON schema a request asks its answer to fit (output_config.format), if any."""
    output = body.get("output_config")
    given = output.get("format") if isinstance(output, dict) else None
    return given.get("schema") if isinstance(given, dict) else None


def _asks_format(body: Mapping[str, Any]) -> bool:
    output = body.get("output_config")
    return isinstance(output, dict) and output.get("format") is not None


def rewrite_stream(text: str, rewrite: api.Rewrite) -> str:
    """A recorded Messages stream with the text deltas and tool inputs rewritten. A tool input comes in
    partial-JSON fragments that may cut a path in two: its whole JSON, rewritten, goes into its first
    fragment and the others are emptied."""
    lines, payloads = sse.data_lines(text, '"content_block_delta"')
    changed: set[int] = set()
    inputs: dict[int, list[int]] = defaultdict(list)
    """Block index -> the lines holding its input_json_delta fragments, in order."""
    for number, payload in payloads.items():
        delta = payload.get("delta")
        if not isinstance(delta, dict):
            continue
        if delta.get("type") == "input_json_delta":
            inputs[int(payload.get("index") or 0)].append(number)
        elif isinstance(delta.get("text"), str) and (new := rewrite(delta["text"])) != delta["text"]:
            delta["text"] = new
            changed.add(number)
    for numbers in inputs.values():
        whole = "".join(str(payloads[n]["delta"].get("partial_json") or "") for n in numbers)
        if (rewritten := api.rewrite_json(whole, rewrite)) is not None:
            for position, n in enumerate(numbers):
                payloads[n]["delta"]["partial_json"] = rewritten if position == 0 else ""
                changed.add(n)
    return sse.joined(lines, payloads, changed)


class _Stream(StreamBase):
    """Follows one SSE response: usage from message_start and message_delta, tool_use blocks by index."""

    def __init__(self) -> None:
        super().__init__()
        self._open: dict[int, tuple[str, str, list[str]]] = {}

    def feed(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "message_start" and isinstance(message := event.get("message"), dict):
            self._outcome.model = str(message.get("model") or "") or None
            self._outcome.usage = _tokens(message.get("usage"), self._outcome.usage)
        elif kind == "content_block_start" and isinstance(block := event.get("content_block"), dict):
            if block.get("type") == "tool_use":
                self._open[int(event.get("index", 0))] = (str(block.get("id", "")), str(block.get("name", "")), [])
        elif kind == "content_block_delta" and isinstance(delta := event.get("delta"), dict):
            if delta.get("type") == "input_json_delta" and (part := self._open.get(int(event.get("index", 0)))):
                part[2].append(str(delta.get("partial_json", "")))
        elif kind == "content_block_stop" and (done := self._open.pop(int(event.get("index", 0)), None)):
            tool_id, name, pieces = done
            try:
                parsed = json.loads("".join(pieces) or "{}")
            except ValueError:
                parsed = {"_unparsed": "".join(pieces)}
            self._outcome.tool_uses.append(ToolUse(tool_id, name, parsed if isinstance(parsed, dict) else {}))
        elif kind == "message_delta":
            self._outcome.usage = _tokens(event.get("usage"), self._outcome.usage)
        elif kind == "message_stop":
            self._outcome.complete = True


class AnthropicProtocol(ProtocolBase):
    name = "anthropic"
    auth_headers = frozenset({"x-api-key", "authorization"})

    def kind(self, method: str, path: str) -> api.CallKind:
        if method == "POST" and path == "/v1/messages":
            return "messages"
        if method == "POST" and path == "/v1/messages/count_tokens":
            return "count_tokens"
        return "other"

    def response_outcome(self, body: Mapping[str, Any]) -> Outcome:
        content = body.get("content")
        blocks = content if isinstance(content, list) else []
        return Outcome(
            complete=True,
            model=self.model(body),
            usage=_tokens(body.get("usage")),
            tool_uses=[t for b in blocks if (t := _tool_use(b)) is not None],
        )

    def stream_reader(self, body: Mapping[str, Any]) -> _Stream:
        return _Stream()

    def tool_results(self, body: Mapping[str, Any]) -> list[ToolResult]:
        found: list[ToolResult] = []
        for message in body.get("messages") or []:
            if not isinstance(message, dict) or not isinstance(message.get("content"), list):
                continue
            for block in message["content"]:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    found.append(
                        ToolResult(
                            str(block.get("tool_use_id", "")), bool(block.get("is_error")), _text(block.get("content"))
                        )
                    )
        return found

    def error_body(self, kind: api.ErrorKind, message: str) -> dict[str, Any]:
        return {"type": "error", "error": {"type": _ERROR_TYPES[kind], "message": message}}

    def credential(self, scheme: Scheme, secret: str, incoming: Mapping[str, str]) -> dict[str, str]:
        if scheme is Scheme.API_KEY:
            return {"x-api-key": secret}
        auth = {"authorization": f"Bearer {secret}"}
        if scheme is Scheme.OAUTH:
            beta = [b.strip() for b in incoming.get("anthropic-beta", "").split(",") if b.strip()]
            auth["anthropic-beta"] = ",".join([*beta, OAUTH_BETA] if OAUTH_BETA not in beta else beta)
        return auth

    def replay_parts(self, path: str, body: Mapping[str, Any]) -> api.ReplayParts:
        kind: api.ReplayKind = "other"
        if path == "/v1/messages/count_tokens":
            kind = "count_tokens"
        elif path == "/v1/messages":
            kind = "main" if body.get("stream") and body.get("tools") and not _asks_format(body) else "side"
        return api.ReplayParts(kind, first_user_text(body), turn_of(body))

    def translate_stream(self, text: str, rewrite: api.Rewrite) -> str:
        return rewrite_stream(text, rewrite)

    def synthesised(self, path: str, body: Mapping[str, Any], kind: api.ReplayKind, tag: str) -> api.Synthesised:
        if kind == "count_tokens":
            return api.Synthesised(
                "application/json", json.dumps({"input_tokens": max(1, len(json.dumps(body)) // 4)}), False
            )
        schema = _schema(body)
        text = sample_text(schema, api.REPLAY_TEXT)
        usage = dict.fromkeys(_USAGE_FIELDS, 0)
        message = {
            "id": f"msg_replay{tag}",
            "type": "message",
            "role": "assistant",
            "model": str(body.get("model") or "replay"),
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        if not body.get("stream"):
            whole = {**message, "content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}
            return api.Synthesised("application/json", json.dumps(whole), False)
        events: list[dict[str, Any]] = [
            {"type": "message_start", "message": {**message, "content": []}},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": usage},
            {"type": "message_stop"},
        ]
        return api.Synthesised("text/event-stream", sse.frame(events, named=True).decode(), True)

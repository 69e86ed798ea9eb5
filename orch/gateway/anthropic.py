"""The Anthropic Messages API for the gateway: /v1/messages (JSON or SSE), /v1/messages/count_tokens;
anything else is passed through uncounted."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from orch.gateway.protocol import ErrorKind, Outcome, ToolResult, ToolUse
from orch.gateway.records import Scheme, Tokens

OAUTH_BETA = "oauth-2025-04-20"
_ERROR_TYPES: dict[ErrorKind, str] = {
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
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            str(c.get("text", "")) if c.get("type") == "text" else f"[{c.get('type')}]"
            for c in content
            if isinstance(c, dict)
        ]
        return "\n".join(parts)
    return ""


class _Stream:
    """Follows one SSE response: usage from message_start and message_delta, tool_use blocks by index."""

    def __init__(self) -> None:
        self._outcome = Outcome()
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

    def outcome(self) -> Outcome:
        return self._outcome


class AnthropicProtocol:
    name = "anthropic"
    auth_headers = frozenset({"x-api-key", "authorization"})

    def kind(self, method: str, path: str) -> Literal["messages", "count_tokens", "other"]:
        if method == "POST" and path == "/v1/messages":
            return "messages"
        if method == "POST" and path == "/v1/messages/count_tokens":
            return "count_tokens"
        return "other"

    def billable(self, method: str, path: str) -> bool:
        return self.kind(method, path) != "other"

    def model(self, body: Mapping[str, Any]) -> str | None:
        model = body.get("model")
        return model if isinstance(model, str) else None

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

    def error_body(self, kind: ErrorKind, message: str) -> dict[str, Any]:
        return {"type": "error", "error": {"type": _ERROR_TYPES[kind], "message": message}}

    def upstream_auth(self, scheme: Scheme, secret: str, incoming: Mapping[str, str]) -> dict[str, str]:
        if scheme is Scheme.API_KEY:
            return {"x-api-key": secret}
        if scheme is Scheme.BEARER:
            return {"authorization": f"Bearer {secret}"}
        if scheme is Scheme.OAUTH:
            beta = [b.strip() for b in incoming.get("anthropic-beta", "").split(",") if b.strip()]
            return {
                "authorization": f"Bearer {secret}",
                "anthropic-beta": ",".join([*beta, OAUTH_BETA] if OAUTH_BETA not in beta else beta),
            }
        if scheme is Scheme.PASSTHROUGH:
            return {k: v for k, v in incoming.items() if k in self.auth_headers}
        return {}

"""The OpenAI Responses API for the gateway: `POST /responses` (JSON or SSE), as Codex CLI calls it.

The pinned Codex sends `{base_url}/responses` with `stream: true` and reads the SSE events
`response.created`, `response.output_item.done` (each output item: a message, a `function_call`, a
reasoning item) and `response.completed`, which carries the whole response with its `usage`. Tool
results come back in the next request's `input` as `function_call_output` items (`call_id`, `output`).

Usage: OpenAI's `input_tokens` includes the cached ones (`input_tokens_details.cached_tokens`); the
gateway's Tokens count them apart (input_tokens: the uncached part, cache_read_input_tokens: the cached
part), so a price table's cache_read rate applies to them. Anything else is passed through uncounted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from orch import sse
from orch.gateway.apis import base as api
from orch.gateway.apis.base import Outcome, ProtocolBase, StreamBase, ToolResult, ToolUse
from orch.gateway.modeldir import Tokens
from orch.jsonsample import sample_text

PATHS = ("/responses", "/v1/responses")
_ERROR_TYPES: dict[api.ErrorKind, tuple[str, str | None]] = {
    "authentication": ("invalid_request_error", "invalid_api_key"),
    "permission": ("invalid_request_error", "insufficient_permissions"),
    "invalid_request": ("invalid_request_error", None),
    "upstream": ("server_error", None),
    "not_found": ("invalid_request_error", "not_found"),
}
_TOOL_CALLS = ("function_call", "custom_tool_call", "local_shell_call")
_TOOL_OUTPUTS = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")
_EXIT_RE = re.compile(r"^Process exited with code (\d+)$", re.MULTILINE)
_FINISHED = ("response.completed", "response.incomplete", "response.failed", "response.done")


def tokens(usage: object) -> Tokens | None:
    """A Responses `usage` object as the gateway's Tokens (cached input apart)."""
    return api.cached_apart(usage, "input_tokens", "output_tokens")


def tool_use(item: object) -> ToolUse | None:
    if not isinstance(item, dict) or item.get("type") not in _TOOL_CALLS:
        return None
    call_id = str(item.get("call_id") or item.get("id") or "")
    raw = item.get("arguments", item.get("input", item.get("action")))
    parsed: Any = raw
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = {"input": raw}  # a custom (freeform) tool's input is plain text
    name = str(item.get("name") or item.get("type"))
    return ToolUse(call_id, name, parsed if isinstance(parsed, dict) else {"input": parsed})


def _output_text(output: object) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "\n".join(
            str(part.get("text", "")) if "text" in part else f"[{part.get('type')}]"
            for part in output
            if isinstance(part, dict)
        )
    if isinstance(output, dict):  # {"content": ..., "success": ...} in some builds
        return _output_text(output.get("content"))
    return ""


def _failed(output: object) -> bool:
    """A failed call: `success: false`, or (Codex's exec_command) a non-zero `Process exited with code N`."""
    if isinstance(output, dict) and output.get("success") is False:
        return True
    exit_code = _EXIT_RE.search(_output_text(output))
    return exit_code is not None and exit_code[1] != "0"


class _Stream(StreamBase):
    """Follows one SSE response: tool calls from output_item.done, model and usage from the final event."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[str] = set()

    def _add(self, item: object) -> None:
        use = tool_use(item)
        if use is not None and use.id not in self._seen:
            self._seen.add(use.id)
            self._outcome.tool_uses.append(use)

    def feed(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        response = event.get("response")
        if kind == "response.created" and isinstance(response, dict):
            self._outcome.model = str(response.get("model") or "") or None
        elif kind == "response.output_item.done":
            self._add(event.get("item"))
        elif kind in _FINISHED and isinstance(response, dict):
            self._outcome.model = str(response.get("model") or "") or self._outcome.model
            self._outcome.usage = tokens(response.get("usage")) or self._outcome.usage
            for item in response.get("output") or []:
                self._add(item)
            self._outcome.complete = True


class ResponsesProtocol(ProtocolBase):
    name = "openai-responses"
    auth_headers = frozenset({"authorization", "api-key", "openai-organization", "openai-project"})

    def kind(self, method: str, path: str) -> api.CallKind:
        return "messages" if method == "POST" and path.split("?", 1)[0] in PATHS else "other"

    def response_outcome(self, body: Mapping[str, Any]) -> Outcome:
        output = body.get("output")
        return Outcome(
            complete=True,
            model=self.model(body),
            usage=tokens(body.get("usage")),
            tool_uses=[u for item in output if (u := tool_use(item)) is not None] if isinstance(output, list) else [],
        )

    def stream_reader(self, body: Mapping[str, Any]) -> _Stream:
        return _Stream()

    def tool_results(self, body: Mapping[str, Any]) -> list[ToolResult]:
        items = body.get("input")
        return [
            ToolResult(str(item.get("call_id", "")), _failed(item.get("output")), _output_text(item.get("output")))
            for item in (items if isinstance(items, list) else [])
            if isinstance(item, dict) and item.get("type") in _TOOL_OUTPUTS
        ]

    def error_body(self, kind: api.ErrorKind, message: str) -> dict[str, Any]:
        kind_name, code = _ERROR_TYPES[kind]
        return {"error": {"message": message, "type": kind_name, "param": None, "code": code}}

    def replay_parts(self, path: str, body: Mapping[str, Any]) -> api.ReplayParts:
        """Main (tools offered, no output format: the agent's own turns) or side (thread titles); the first
        message someone typed (not the context Codex injects); the number of input items."""
        kind: api.ReplayKind = "main" if body.get("tools") and not _asks_format(body) else "side"
        items = body.get("input")
        items = items if isinstance(items, list) else []
        first = ""
        for item in items:
            if isinstance(item, dict) and item.get("type", "message") == "message" and item.get("role") == "user":
                typed = _output_text(item.get("content")).strip()
                if typed and not typed.startswith(_INJECTED):
                    first = typed
                    break
        return api.ReplayParts(kind, first, len(items))

    def translate_stream(self, text: str, rewrite: api.Rewrite) -> str:
        """Codex runs a call from its `output_item.done` item, whose arguments are whole; an argument delta
        is rewritten as plain text."""
        lines, payloads = sse.data_lines(text)
        changed = set()
        for number, payload in payloads.items():
            if (rewritten := _rewrite(payload, rewrite)) != payload:
                payloads[number] = rewritten
                changed.add(number)
        return sse.joined(lines, payloads, changed)

    def synthesised(self, path: str, body: Mapping[str, Any], kind: api.ReplayKind, tag: str) -> api.Synthesised:
        """A completed response with one message (a api.sample of the asked-for schema, else a short text)."""
        given = body.get("text")
        text_format = given.get("format") if isinstance(given, dict) else None
        schema = text_format.get("schema") if isinstance(text_format, dict) else None
        text = sample_text(schema, api.REPLAY_TEXT)
        item: dict[str, Any] = {
            "type": "message",
            "id": f"msg_replay{tag}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        usage = {"input_tokens": 0, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 0, "total_tokens": 0}
        done: dict[str, Any] = {
            "id": f"resp_replay{tag}",
            "object": "response",
            "status": "completed",
            "model": str(body.get("model") or "replay"),
            "output": [item],
            "usage": usage,
        }
        if not body.get("stream"):
            return api.Synthesised("application/json", json.dumps(done), False)
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": {**done, "status": "in_progress", "output": [], "usage": None}},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {"type": "response.completed", "response": done},
        ]
        numbered = [{**event, "sequence_number": n} for n, event in enumerate(events)]
        return api.Synthesised("text/event-stream", sse.frame(numbered, named=True).decode(), True)


_INJECTED = ("<environment_context>", "<user_instructions>", "<turn_aborted>", "# AGENTS.md instructions")


def _asks_format(body: Mapping[str, Any]) -> bool:
    text = body.get("text")
    return isinstance(text, dict) and text.get("format") not in (None, {"type": "text"})


def _rewrite(value: Any, rewrite: api.Rewrite, key: str = "") -> Any:
    if isinstance(value, str):
        if key == "arguments":  # a function call's input: JSON in a string
            try:
                return json.dumps(_rewrite(json.loads(value), rewrite))
            except ValueError:
                return rewrite(value)
        return rewrite(value)
    if isinstance(value, list):
        return [_rewrite(v, rewrite) for v in value]
    if isinstance(value, dict):
        return {k: _rewrite(v, rewrite, k) for k, v in value.items()}
    return value

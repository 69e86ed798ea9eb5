"""Google's Gemini API for the gateway: `/v1beta/models/<model>:generateContent` (JSON),
`:streamGenerateContent?alt=sse` (server-sent events, each a whole GenerateContentResponse chunk) and
`:countTokens`; anything else is passed through uncounted.

Usage is the chunk's `usageMetadata`: `promptTokenCount` includes `cachedContentTokenCount` (counted here
as cache reads, the rest as input), and `thoughtsTokenCount` is billed as output beside
`candidatesTokenCount`. The model is the response's `modelVersion` (the request names it only in the
path). Tool calls are `functionCall` parts; their results come back as `functionResponse` parts.

Ledger ids: the API gives a call no id, and Gemini CLI makes one up after the response
(`run_shell_command_<ms>_<n>`), which the gateway never sees in the response. So a call without an API id
is known by its name and a digest of its arguments, and a result whose call id is one Gemini CLI made up
takes the id of that call as echoed in the request's history. Two identical calls in one conversation
share one ledger entry (the second is a repeat of the first).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from orch import sse
from orch.gateway.apis import base as api
from orch.gateway.apis.base import Outcome, ProtocolBase, StreamBase, ToolResult, ToolUse
from orch.gateway.modeldir import Scheme, Tokens
from orch.jsonsample import sample_text

PATH_RE = re.compile(r"^/v1(?:beta|alpha)?/models/([^/:]+):(generateContent|streamGenerateContent|countTokens)$")
MADE_UP_ID = re.compile(r"^.+_\d{10,}_\d+$")
"""An id the pinned Gemini CLI gave a call itself: `<tool name>_<epoch ms>_<index>`."""
_ERRORS: dict[api.ErrorKind, tuple[int, str]] = {
    "authentication": (401, "UNAUTHENTICATED"),
    "permission": (403, "PERMISSION_DENIED"),
    "invalid_request": (400, "INVALID_ARGUMENT"),
    "upstream": (502, "UNAVAILABLE"),
    "not_found": (404, "NOT_FOUND"),
}


def tokens(usage: object) -> Tokens | None:
    if not isinstance(usage, dict):
        return None
    cached = api.count(usage.get("cachedContentTokenCount"))
    prompt = api.count(usage.get("promptTokenCount")) + api.count(usage.get("toolUsePromptTokenCount"))
    return Tokens(
        input_tokens=max(0, prompt - cached),
        output_tokens=api.count(usage.get("candidatesTokenCount")) + api.count(usage.get("thoughtsTokenCount")),
        cache_read_input_tokens=cached,
    )


def call_key(name: str, args: object) -> str:
    """The ledger id of a call the API gave no id: its name and a digest of its arguments."""
    digest = hashlib.sha256(json.dumps(args, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return f"{name}:{digest}"


def _calls(chunk: Mapping[str, Any]) -> list[ToolUse]:
    """The functionCall parts of a response chunk."""
    found: list[ToolUse] = []
    for candidate in chunk.get("candidates") or []:
        content = candidate.get("content") if isinstance(candidate, dict) else None
        parts = content.get("parts") if isinstance(content, dict) else None
        for part in parts if isinstance(parts, list) else []:
            call = part.get("functionCall") if isinstance(part, dict) else None
            if not isinstance(call, dict):
                continue
            given = call.get("args")
            args: dict[str, Any] = given if isinstance(given, dict) else {}
            name = str(call.get("name", ""))
            found.append(ToolUse(str(call.get("id") or call_key(name, args)), name, args))
    return found


def _finished(chunk: Mapping[str, Any]) -> bool:
    return any(isinstance(c, dict) and c.get("finishReason") for c in chunk.get("candidates") or [])


SESSION_CONTEXT_RE = re.compile(r"<session_context>.*?</session_context>", re.DOTALL)


def _schema(body: Mapping[str, Any]) -> object:
    config = body.get("generationConfig")
    return (config.get("responseJsonSchema") or config.get("responseSchema")) if isinstance(config, dict) else None


class _Stream(StreamBase):
    """Follows one SSE response: every chunk may carry parts; the last usageMetadata holds the totals."""

    def feed(self, event: dict[str, Any]) -> None:
        outcome = self._outcome
        if isinstance(model := event.get("modelVersion"), str) and model:
            outcome.model = model
        outcome.usage = tokens(event.get("usageMetadata")) or outcome.usage
        outcome.tool_uses += _calls(event)
        if _finished(event):
            outcome.complete = True


class GeminiProtocol(ProtocolBase):
    """The model is not in Gemini CLI's bodies (the path names it): the response's modelVersion counts."""

    name = "gemini"
    auth_headers = frozenset({"x-goog-api-key", "authorization"})

    def kind(self, method: str, path: str) -> api.CallKind:
        match = PATH_RE.match(path)
        if method != "POST" or match is None:
            return "other"
        return "count_tokens" if match[2] == "countTokens" else "messages"

    def response_outcome(self, body: Mapping[str, Any]) -> Outcome:
        model = body.get("modelVersion")
        return Outcome(
            complete=True,
            model=model if isinstance(model, str) and model else None,
            usage=tokens(body.get("usageMetadata")),
            tool_uses=_calls(body),
        )

    def stream_reader(self, body: Mapping[str, Any]) -> _Stream:
        return _Stream()

    def tool_results(self, body: Mapping[str, Any]) -> list[ToolResult]:
        found: list[ToolResult] = []
        echoed: dict[str, str] = {}  # a call's id in the history -> its ledger id
        for content in body.get("contents") or []:
            parts = content.get("parts") if isinstance(content, dict) else None
            for part in parts if isinstance(parts, list) else []:
                call = part.get("functionCall") if isinstance(part, dict) else None
                if isinstance(call, dict) and isinstance(given := call.get("id"), str):
                    made_up = MADE_UP_ID.match(given) is not None
                    echoed[given] = call_key(str(call.get("name", "")), call.get("args") or {}) if made_up else given
                response = part.get("functionResponse") if isinstance(part, dict) else None
                if not isinstance(response, dict):
                    continue
                result = response.get("response")
                is_error = isinstance(result, dict) and "error" in result
                if isinstance(result, dict) and isinstance(text := result.get("error" if is_error else "output"), str):
                    output = text
                else:
                    output = json.dumps(result)
                given_id = str(response.get("id") or "")
                call_id = echoed.get(given_id, given_id)
                found.append(ToolResult(call_id, is_error, output))
        return found

    def error_body(self, kind: api.ErrorKind, message: str) -> dict[str, Any]:
        code, status = _ERRORS[kind]
        return {"error": {"code": code, "message": message, "status": status}}

    def credential(self, scheme: Scheme, secret: str, incoming: Mapping[str, str]) -> dict[str, str]:
        if scheme is Scheme.BEARER:
            return {"authorization": f"Bearer {secret}"}
        return {"x-goog-api-key": secret}  # an API key, or an OAuth token Google takes the same way

    def replay_parts(self, path: str, body: Mapping[str, Any]) -> api.ReplayParts:
        """The first user content is Gemini CLI's `<session_context>` (today's date, its own temp folder, the
        workdir listing), which differs between two runs of the same work: it is left out. Main calls are
        streamed with tools and ask for no JSON schema; the model router, the next-speaker check and the
        like are side calls."""
        match = PATH_RE.match(path)
        method = match[2] if match else ""
        contents = [c for c in body.get("contents") or [] if isinstance(c, dict)]
        if method == "countTokens":
            return api.ReplayParts("count_tokens", "", len(contents))
        main = method == "streamGenerateContent" and body.get("tools") and not _schema(body)
        first = ""
        for content in contents:
            if content.get("role") != "model":
                parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
                texts = [SESSION_CONTEXT_RE.sub("", str(p.get("text", ""))).strip() for p in parts if "text" in p]
                first = "\n".join(t for t in texts if t)
                if first:
                    break
        return api.ReplayParts("main" if main else "side", first, len(contents))

    def translate_stream(self, text: str, rewrite: api.Rewrite) -> str:
        """Each chunk is a whole JSON object, so a call's arguments are never cut across events."""
        lines, payloads = sse.data_lines(text, '"candidates"')
        changed = set()
        for number, chunk in payloads.items():
            new = dict(chunk, candidates=api.rewrite_value(chunk.get("candidates"), rewrite))
            if new != chunk:
                payloads[number] = new
                changed.add(number)
        return sse.joined(lines, payloads, changed)

    def synthesised(self, path: str, body: Mapping[str, Any], kind: api.ReplayKind, tag: str) -> api.Synthesised:
        match = PATH_RE.match(path)
        model, method = (match[1], match[2]) if match else ("replay", "generateContent")
        if kind == "count_tokens":
            return api.Synthesised(
                "application/json", json.dumps({"totalTokens": max(1, len(json.dumps(body)) // 4)}), False
            )
        schema = _schema(body)
        text = sample_text(schema, api.REPLAY_TEXT, 1)
        chunk = {
            "candidates": [
                {"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}
            ],
            "usageMetadata": {"promptTokenCount": 0, "candidatesTokenCount": 0, "totalTokenCount": 0},
            "modelVersion": model,
        }
        if method == "streamGenerateContent":
            return api.Synthesised("text/event-stream", sse.frame([chunk], crlf=True).decode(), True)
        return api.Synthesised("application/json", json.dumps(chunk), False)

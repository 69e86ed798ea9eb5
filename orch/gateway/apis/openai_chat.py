"""OpenAI Chat Completions for the gateway: `POST …/chat/completions` (JSON, or SSE when `stream` is set);
anything else (`GET …/models`) is passed through uncounted.

A worker's base URL is the gateway's `/t/<token>` (the API root, as `OPENAI_BASE_URL` is), so the path
is `/chat/completions`; `/v1/chat/completions` is taken too, for clients that add the version themselves.

Usage: `prompt_tokens` includes `prompt_tokens_details.cached_tokens`; the books keep them apart
(input = prompt - cached, cache reads = cached; the API has no cache-write charge). A stream carries
usage only when the client asks (`stream_options.include_usage`, which opencode and aider do); a stream
is complete at `data: [DONE]`, which is not JSON, so the reader also takes a chunk with a
`finish_reason` followed by the usage chunk: the outcome is complete once a finish reason came.

aider offers the model no tools: it runs the lines of the fenced shell blocks in the answer's text
(```bash, ```sh, ...), each line a command of its own (the pinned aider: editblock_coder.find_original_update_blocks,
base_coder.handle_shell_commands). For its turns (`main_call` with no tools) the ledger gets each such
line as a call of the tool TEXT_SHELL, as if the model had asked for it by name; no result comes back
under an id, so none is ledgered.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from orch import sse
from orch.contracts import TEXT_EDIT, TEXT_SHELL
from orch.gateway.apis import base as api
from orch.gateway.apis.base import Outcome, ProtocolBase, StreamBase, ToolResult, ToolUse
from orch.gateway.modeldir import Tokens

PATHS = ("/chat/completions", "/v1/chat/completions")
_SHELL_FENCE = re.compile(r"^```(?:bash|sh|shell|zsh|ksh|fish|csh|tcsh)\b")
_ERROR_TYPES: dict[api.ErrorKind, str] = {
    "authentication": "invalid_api_key",
    "permission": "insufficient_permissions",
    "invalid_request": "invalid_request_error",
    "upstream": "server_error",
    "not_found": "not_found",
}


def handles(method: str, path: str) -> bool:
    """The requests this protocol counts (the gateway picks a protocol by path: orch.gateway.apis.registry)."""
    return method == "POST" and path.split("?", 1)[0] in PATHS


def main_call(body: Mapping[str, Any]) -> bool:
    """An agent's own turn (replay's `main` kind): streamed, with tools offered, or from aider, which offers
    none (it reads edit and shell blocks from the text) but whose system prompt teaches SEARCH/REPLACE blocks.
    Anything else (opencode's titles, aider's history summaries, which are not streamed) is a side call."""
    if not body.get("stream"):
        return False
    if body.get("tools"):
        return True
    messages = body.get("messages")
    listed = messages if isinstance(messages, list) else []
    system = next((m for m in listed if isinstance(m, dict) and m.get("role") == "system"), None)
    content = system.get("content") if system else None
    return isinstance(content, str) and "SEARCH/REPLACE" in content


def text_shell_calls(text: str, tag: str) -> list[ToolUse]:
    """The commands aider would run from an answer's text: every non-blank line of each fenced shell block
    (a fence directly followed by a SEARCH/REPLACE block is an edit, as aider reads it). `tag` makes the
    calls' ids (the answer's id)."""
    lines = text.splitlines()
    commands: list[str] = []
    i = 0
    while i < len(lines):
        edit = any(line.strip().startswith("<<<<<<< SEARCH") for line in lines[i + 1 : i + 3])
        if _SHELL_FENCE.match(lines[i].strip()) and not edit:
            i += 1
            while i < len(lines) and not lines[i].strip().startswith("```"):
                if lines[i].strip() and not lines[i].strip().startswith("#"):
                    commands.append(lines[i].strip())
                i += 1
        i += 1
    return [ToolUse(f"{tag}:{n}", TEXT_SHELL, {"command": command}) for n, command in enumerate(commands)]


def text_edit_calls(text: str, tag: str) -> list[ToolUse]:
    """The edits aider would make from an answer's text: each SEARCH/REPLACE block, with the file named on the line
    before it (or before its opening fence), as a TEXT_EDIT call (`file_path`, `old_string`, `new_string`)."""
    lines = text.splitlines()
    calls: list[ToolUse] = []
    for i, line in enumerate(lines):
        if not line.strip().startswith("<<<<<<< SEARCH"):
            continue
        named = [ln.strip() for ln in lines[max(0, i - 2) : i] if ln.strip() and not ln.strip().startswith("```")]
        try:
            middle = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "=======")
            end = next(j for j in range(middle + 1, len(lines)) if lines[j].strip().startswith(">>>>>>> REPLACE"))
        except StopIteration:
            continue  # torn: aider would not apply it either
        edit = {
            "file_path": named[-1] if named else "",
            "old_string": "\n".join(lines[i + 1 : middle]),
            "new_string": "\n".join(lines[middle + 1 : end]),
        }
        calls.append(ToolUse(f"{tag}:e{len(calls)}", TEXT_EDIT, edit))
    return calls


def tokens(usage: object) -> Tokens | None:
    return api.cached_apart(usage, "prompt_tokens", "completion_tokens")


def _arguments(text: str) -> dict[str, Any]:
    try:
        parsed = json.loads(text or "{}")
    except ValueError:
        return {"_unparsed": text}
    return parsed if isinstance(parsed, dict) else {"_value": parsed}


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", "")) if p.get("type") == "text" else f"[{p.get('type')}]"
            for p in content
            if isinstance(p, dict)
        )
    return ""


class _Stream(StreamBase):
    """Follows one chat.completion.chunk stream: tool call fragments by index, the finish, the usage."""

    def __init__(self, text_shell: bool = False) -> None:
        super().__init__()
        self._calls: dict[int, list[str]] = {}
        self._order: list[int] = []
        self._finished = False
        self._text: list[str] | None = [] if text_shell else None  # only aider's answers are read as text
        self._id = ""

    def feed(self, event: dict[str, Any]) -> None:
        if isinstance(model := event.get("model"), str) and model:
            self._outcome.model = model
        if not self._id and isinstance(given := event.get("id"), str):
            self._id = given
        if (usage := tokens(event.get("usage"))) is not None:
            self._outcome.usage = usage
        for choice in event.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta")
            if self._text is not None and isinstance(delta, dict) and isinstance(delta.get("content"), str):
                self._text.append(delta["content"])
            for call in (delta.get("tool_calls") if isinstance(delta, dict) else None) or []:
                if not isinstance(call, dict):
                    continue
                index = api.count(call.get("index"))
                given = call.get("function")
                function: dict[str, Any] = given if isinstance(given, dict) else {}
                if index not in self._calls:
                    self._calls[index] = [str(call.get("id", "")), str(function.get("name", "")), ""]
                    self._order.append(index)
                part = self._calls[index]
                if call.get("id"):
                    part[0] = str(call["id"])
                if function.get("name"):
                    part[1] = str(function["name"])
                part[2] += str(function.get("arguments") or "")
            if choice.get("finish_reason"):
                self._finished = True
        self._outcome.complete = self._finished

    def outcome(self) -> Outcome:
        self._outcome.tool_uses = [
            ToolUse(self._calls[i][0], self._calls[i][1], _arguments(self._calls[i][2])) for i in self._order
        ]
        if self._text is not None and self._outcome.complete:
            text = "".join(self._text)
            tag = self._id or hashlib.sha256(text.encode()).hexdigest()[:16]
            self._outcome.tool_uses += text_shell_calls(text, tag) + text_edit_calls(text, tag)
        return self._outcome


class ChatCompletionsProtocol(ProtocolBase):
    name = "openai-chat"
    auth_headers = frozenset({"authorization", "api-key", "x-api-key"})

    def kind(self, method: str, path: str) -> api.CallKind:
        return "messages" if handles(method, path) else "other"

    def response_outcome(self, body: Mapping[str, Any]) -> Outcome:
        uses: list[ToolUse] = []
        for choice in body.get("choices") or []:
            message = choice.get("message") if isinstance(choice, dict) else None
            for call in (message.get("tool_calls") if isinstance(message, dict) else None) or []:
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict):
                    args = function.get("arguments")
                    uses.append(
                        ToolUse(str(call.get("id", "")), str(function.get("name", "")), _arguments(str(args or "")))
                    )
        return Outcome(
            complete=True,
            model=self.model(body),
            usage=tokens(body.get("usage")),
            tool_uses=uses,
        )

    def stream_reader(self, body: Mapping[str, Any]) -> _Stream:
        return _Stream(text_shell=main_call(body) and not body.get("tools"))

    def tool_results(self, body: Mapping[str, Any]) -> list[ToolResult]:
        # Chat Completions has no error flag on a tool result: the agent writes the error as text.
        return [
            ToolResult(str(m.get("tool_call_id", "")), False, _text(m.get("content")))
            for m in body.get("messages") or []
            if isinstance(m, dict) and m.get("role") == "tool"
        ]

    def error_body(self, kind: api.ErrorKind, message: str) -> dict[str, Any]:
        code = _ERROR_TYPES[kind]
        return {"error": {"message": message, "type": code, "param": None, "code": code}}

    def upstream_body(self, body: Mapping[str, Any], raw: bytes) -> bytes:
        """The request as sent upstream: a stream that does not ask for usage (the pinned aider's) is made to,
        else the books could not api.count it. The extra final chunk (`choices: []`) is standard API output."""
        options = body.get("stream_options")
        if not body.get("stream") or (isinstance(options, dict) and options.get("include_usage")):
            return raw
        given = options if isinstance(options, dict) else {}
        return json.dumps({**body, "stream_options": {**given, "include_usage": True}}).encode()

    def replay_parts(self, path: str, body: Mapping[str, Any]) -> api.ReplayParts:
        """Main (`main_call`: aider's turns offer no tools either) or side; the first user message; the number
        of messages."""
        messages = body.get("messages")
        listed = messages if isinstance(messages, list) else []
        first = next((m for m in listed if isinstance(m, dict) and m.get("role") == "user"), None)
        kind: api.ReplayKind = "main" if main_call(body) else "side"
        return api.ReplayParts(kind, _text(first.get("content")) if first else "", len(listed))

    def translate_stream(self, text: str, rewrite: api.Rewrite) -> str:
        """Content text and each tool call's arguments rewritten. Arguments come in fragments that may cut a
        path in two: the rewritten whole goes into the first fragment and the others are emptied."""
        lines, payloads = sse.data_lines(text)
        changed: set[int] = set()
        fragments: dict[int, list[dict[str, Any]]] = {}
        owners: dict[int, list[int]] = {}
        for number, chunk in payloads.items():
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") if isinstance(choice, dict) else None
                if not isinstance(delta, dict):
                    continue
                if isinstance(delta.get("content"), str) and (new := rewrite(delta["content"])) != delta["content"]:
                    delta["content"] = new
                    changed.add(number)
                for call in delta.get("tool_calls") or []:
                    if isinstance(call, dict) and isinstance(call.get("function"), dict):
                        fragments.setdefault(api.count(call.get("index")), []).append(call["function"])
                        owners.setdefault(api.count(call.get("index")), []).append(number)
        for index, functions in fragments.items():
            whole = "".join(str(f.get("arguments") or "") for f in functions)
            if (rewritten := api.rewrite_json(whole, rewrite)) is not None:
                for position, function in enumerate(functions):
                    function["arguments"] = rewritten if position == 0 else ""
                changed.update(owners[index])
        return sse.joined(lines, payloads, changed)

    def synthesised(self, path: str, body: Mapping[str, Any], kind: api.ReplayKind, tag: str) -> api.Synthesised:
        """A short text answer (titles, summaries), streamed as chunks when asked."""
        base = {"id": f"chatcmpl-replay{tag}", "created": 0, "model": str(body.get("model") or "replay")}
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        if not body.get("stream"):
            message = {"role": "assistant", "content": api.REPLAY_TEXT}
            whole = {**base, "object": "chat.completion", "usage": usage,
                     "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}  # fmt: skip
            return api.Synthesised("application/json", json.dumps(whole), False)
        chunk = {**base, "object": "chat.completion.chunk"}
        chunks = [
            {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": api.REPLAY_TEXT}}]},
            {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {**chunk, "choices": [], "usage": usage},
        ]
        return api.Synthesised("text/event-stream", sse.frame(chunks, done=True).decode(), True)

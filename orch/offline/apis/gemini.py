"""The scripted model over Google's Gemini API (`generateContent`, `streamGenerateContent`, `countTokens`),
as the pinned Gemini CLI calls it with `GOOGLE_GEMINI_BASE_URL` set.

The script logic stays in orch.offline.script, which reads a neutral message history (roles user and
assistant, `tool_use` / `tool_result` blocks named Bash, Write, Read). This module translates a Gemini
request into that history and the answer back:

- `contents[].role` "model" is the assistant; `functionCall` parts are tool uses and `functionResponse`
  parts tool results, paired by the id Gemini CLI gives each call (`run_shell_command_<ms>_<n>`), else
  by order.
- Gemini CLI's own tools map to the script's: run_shell_command (command) is Bash, write_file
  (file_path, content) is Write, read_file (file_path) is Read; any other tool goes by its own name.
- The `<session_context>` text Gemini CLI puts before the first prompt (today's date, the folder
  listing) is not part of what anyone typed: it is dropped, so a `*.md` name in a listing never reads
  as a brief.
- Side calls take no script step: anything not streamed, or streamed without tools (the model router's
  complexity score, the next-speaker check, loop detection) gets a minimal answer, JSON that fits the
  asked-for `responseJsonSchema` when there is one.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from orch import sse
from orch.jsonsample import sample_text
from orch.offline.apis.base import SIDE_TEXT, Reply, json_reply, stream_reply, tokens
from orch.offline.script import Answer, Message, next_answer, prompt_text

PATH_RE = re.compile(r"^/v1(?:beta|alpha)?/models/([^/:]+):(generateContent|streamGenerateContent|countTokens)$")
SESSION_CONTEXT_RE = re.compile(r"<session_context>.*?</session_context>", re.DOTALL)
TO_SCRIPT = {"run_shell_command": "Bash", "write_file": "Write", "read_file": "Read"}
FROM_SCRIPT = {v: k for k, v in TO_SCRIPT.items()}
# Google's error statuses for the scripted failures (HTTP status, status name).
FAILURES = {
    "rate_limit": (429, "RESOURCE_EXHAUSTED", "Scripted rate limit"),
    "overloaded": (503, "UNAVAILABLE", "Scripted overload"),
    "authentication": (401, "UNAUTHENTICATED", "Scripted authentication failure"),
}


def route(path: str) -> tuple[str, str] | None:
    """(model, method) for a Gemini API path, else None."""
    match = PATH_RE.match(path)
    return (match[1], match[2]) if match else None


def _text(parts: list[dict[str, Any]]) -> str:
    texts = [SESSION_CONTEXT_RE.sub("", str(p["text"])).strip() for p in parts if isinstance(p.get("text"), str)]
    return "\n".join(t for t in texts if t)


def _result_text(response: object) -> tuple[str, bool]:
    """A functionResponse's text and whether it is an error ({"output": ...} or {"error": ...})."""
    if not isinstance(response, dict):
        return str(response), False
    if "error" in response:
        return str(response["error"]), True
    output = response.get("output")
    return (output if isinstance(output, str) else json.dumps(response)), False


def messages(body: Mapping[str, Any]) -> list[Message]:
    """The request's contents as the neutral history orch.offline.script reads."""
    history: list[Message] = []
    pending: list[str] = []  # ids of calls not yet answered, oldest first (pairing when ids are missing)
    for turn, content in enumerate(body.get("contents") or []):
        if not isinstance(content, dict):
            continue
        parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
        blocks: list[dict[str, Any]] = []
        if text := _text(parts):
            blocks.append({"type": "text", "text": text})
        if content.get("role") == "model":
            for k, part in enumerate(p for p in parts if isinstance(p.get("functionCall"), dict)):
                call = part["functionCall"]
                name = str(call.get("name", ""))
                call_id = str(call.get("id") or f"{name}@{turn}.{k}")
                pending.append(call_id)
                args = call.get("args")
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call_id,
                        "name": TO_SCRIPT.get(name, name),
                        "input": args if isinstance(args, dict) else {},
                    }
                )
            history.append({"role": "assistant", "content": blocks})
            continue
        for part in parts:
            response = part.get("functionResponse")
            if not isinstance(response, dict):
                continue
            given = response.get("id")
            call_id = str(given) if given else (pending[0] if pending else "")
            if call_id in pending:
                pending.remove(call_id)
            text, is_error = _result_text(response.get("response"))
            blocks.append({"type": "tool_result", "tool_use_id": call_id, "is_error": is_error, "content": text})
        history.append({"role": "user", "content": blocks})
    return history


def _part(answer: Answer) -> dict[str, Any]:
    if answer.kind != "tool":
        return {"text": answer.text}
    name = FROM_SCRIPT.get(answer.tool, answer.tool)
    args = dict(answer.tool_input)
    if name == "run_shell_command":
        args = {"command": args.get("command", ""), "description": args.get("description", "scripted step")}
    return {"functionCall": {"name": name, "args": args}}


def _chunk(model: str, part: dict[str, Any], usage: dict[str, int], response_id: str) -> dict[str, Any]:
    return {
        "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": usage,
        "modelVersion": model,
        "responseId": response_id,
    }


def answer(path: str, body: Mapping[str, Any], raw_size: int) -> Reply:
    """Answer one Gemini API call (the path must `route`)."""
    routed = route(path)
    assert routed is not None, path
    model, method = routed
    if method == "countTokens":
        return json_reply(200, {"totalTokens": max(1, raw_size // 4)}, "count_tokens")
    given = body.get("generationConfig")
    config: Mapping[str, Any] = given if isinstance(given, dict) else {}
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    stream = method == "streamGenerateContent"
    if not stream or not body.get("tools") or schema is not None:
        next_move = Answer("text", text=sample_text(schema, SIDE_TEXT, 1), step="side")
    else:
        next_move = next_answer(messages(body))
    if next_move.kind == "fail":
        status, name, message = FAILURES.get(next_move.text, (500, "INTERNAL", "Scripted API error"))
        return json_reply(status, {"error": {"code": status, "message": message, "status": name}}, next_move.step)
    part = _part(next_move)
    prompt_tokens = max(1, raw_size // 4)
    output = tokens(json.dumps(part))
    usage = {
        "promptTokenCount": prompt_tokens,
        "candidatesTokenCount": output,
        "totalTokenCount": prompt_tokens + output,
    }
    chunk = _chunk(model, part, usage, uuid.uuid4().hex)
    if not stream:
        return json_reply(200, chunk, next_move.step)
    return replace(stream_reply(sse.frame([chunk], crlf=True), next_move.step), headers={"Cache-Control": "no-cache"})


def prompt(history: list[Message]) -> str | None:
    """The latest typed prompt of a translated history (for the server's request log)."""
    return next((t for m in reversed(history) if (t := prompt_text(m))), None)


class GeminiApi:
    name = "gemini"

    def handles(self, path: str) -> bool:
        return route(path) is not None

    def answer(self, path: str, body: Mapping[str, Any], raw: bytes) -> Reply:
        reply = answer(path, body, len(raw))
        model = (route(path) or ("", ""))[0]
        return replace(
            reply, model=model, stream=reply.content_type == "text/event-stream", prompt=prompt(messages(body))
        )

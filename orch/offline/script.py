"""The scripted model's moves: parse an orch-script and derive the next answer from a message history.

Pure: no I/O, no state. The model is stateless: every answer is derived from the request's message
history, so retries, restarts and parallel workers need no bookkeeping. orch.offline.modelserver
serves it over HTTP.

The script is a fenced block, one JSON object per line, either in the prompt itself or in a brief:
when the prompt names an absolute `*.md` path, the model first Reads it and takes the script from
the tool result (line-number prefixes stripped). Prose around the block is ignored.

    ```orch-script
    {"bash": "echo hi >> /tmp/x"}                 -> Bash tool_use
    {"write": "/abs/file.md", "content": "a\\nb"}  -> Write tool_use
    {"read": "/abs/path"}                         -> Read tool_use
    {"tool": "WebFetch", "input": {...}}          -> any other tool_use by name
    {"reply": "final text"}                       -> text, end_turn
    {"fail": "rate_limit"}                        -> HTTP 429 (overloaded: 529, authentication: 401,
                                                     anything else: 500)
    {"fail": "rate_limit", "retry_after": 3}      -> the same, with `retry-after: 3`
    ```

Position in the script: each tool_use the assistant sent since the script arrived passes one tool
step. A reply or fail step is passed by the next user prompt. So a fail step fails every request
that reaches it (the error says `x-should-retry: false`, so Claude Code gives up at once and fires
StopFailure) and a nudge such as "continue" resumes after it. A later prompt without a script of
its own continues the latest script. Steps exhausted -> "Done."; no script anywhere -> "OK".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

SCRIPT_RE = re.compile(r"```orch-script[^\n]*\n(.*?)```", re.DOTALL)
REMINDER_RE = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)
BRIEF_RE = re.compile(r"(/[^\s'\"`<>()]+\.md)\b")
INTERRUPTED_RE = re.compile(r"^\[Request interrupted by user[^\]]*\]$", re.MULTILINE)
# Read returns numbered lines: "1\ttext" in the pinned Claude Code, "     1→text" in other builds,
# "1: text" in the pinned opencode.
LINE_NO_RE = re.compile(r"^ *\d+(?:→|\t|: ?)", re.MULTILINE)
TOOLS = {"bash": "Bash", "write": "Write", "read": "Read"}

Message = dict[str, Any]


@dataclass
class Answer:
    """The next assistant move: a text turn, one tool call, or an HTTP error."""

    kind: str  # "text" | "tool" | "fail"
    text: str = ""
    tool: str = ""
    tool_input: dict[str, Any] = field(default_factory=dict)
    step: str = ""
    retry_after: float | None = None
    """A fail step's retry-after header (seconds), if the script gives one."""


def _blocks(message: Message) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _text(content: Any) -> str:
    """Text of a message or tool_result content, without Claude Code's system reminders."""
    if isinstance(content, str):
        parts = [content]
    else:
        parts = [b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"]
    return "\n".join(REMINDER_RE.sub("", p).strip() for p in parts if p).strip()


def prompt_text(message: Message) -> str | None:
    """The text someone typed into a user turn, else None.

    Tool results do not count, but text next to them does: Claude Code merges a prompt sent after a
    failed turn into the user message that holds the last tool_result.
    """
    if message.get("role") != "user":
        return None
    text = INTERRUPTED_RE.sub("", _text(_blocks(message))).strip()
    return text or None


def parse_script(text: str) -> list[dict[str, Any]] | None:
    """The orch-script steps in `text` (None when it has no block); raises ValueError on bad lines."""
    match = SCRIPT_RE.search(text)
    if match is None:
        return None
    steps: list[dict[str, Any]] = []
    for number, line in enumerate(match.group(1).splitlines(), 1):
        if not line.strip():
            continue
        try:
            step = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"orch-script line {number} is not JSON: {exc}") from None
        if not isinstance(step, dict) or not ({*TOOLS, "tool", "reply", "fail"} & step.keys()):
            raise ValueError(f"orch-script line {number} is not a known step: {line.strip()}")
        steps.append(step)
    return steps


def _tool_results(message: Message) -> dict[str, dict[str, Any]]:
    return {str(b.get("tool_use_id")): b for b in _blocks(message) if b.get("type") == "tool_result"}


def _find_brief(messages: list[Message], start: int, path: str) -> tuple[int, str] | Answer:
    """After the prompt at `start`: (index, text) of the brief's first successful Read, else what to do."""
    pending: dict[str, int] = {}
    failure: tuple[int, str] | None = None
    for index in range(start + 1, len(messages)):
        message = messages[index]
        if message.get("role") == "assistant":
            for block in _blocks(message):
                is_read = block.get("type") == "tool_use" and block.get("name") == "Read"
                if is_read and (block.get("input") or {}).get("file_path") == path:
                    pending[str(block.get("id"))] = index
            continue
        for use_id, result in _tool_results(message).items():
            if use_id in pending:
                if not result.get("is_error"):
                    return index, LINE_NO_RE.sub("", _text(result.get("content")))
                failure = (index, _text(result.get("content")))
    if failure is not None and not any(prompt_text(m) for m in messages[failure[0] + 1 :]):
        return Answer("text", text=f"Could not read {path}: {failure[1]}", step="brief-error")
    return Answer("tool", tool="Read", tool_input={"file_path": path}, step="Read")


def _script_source(messages: list[Message]) -> tuple[int, str] | Answer | None:
    """The latest prompt carrying a script (inline or via a brief): (anchor index, script text)."""
    for index in range(len(messages) - 1, -1, -1):
        text = prompt_text(messages[index])
        if text is None:
            continue
        if SCRIPT_RE.search(text):
            return index, text
        brief = BRIEF_RE.search(text)
        if brief:
            return _find_brief(messages, index, brief.group(1))
    return None


def _step_answer(step: dict[str, Any]) -> Answer:
    if "reply" in step:
        return Answer("text", text=str(step["reply"]), step="reply")
    if "fail" in step:
        wait = step.get("retry_after")
        retry_after = float(wait) if isinstance(wait, int | float) and wait >= 0 else None
        return Answer("fail", text=str(step["fail"]), step=f"fail:{step['fail']}", retry_after=retry_after)
    if "tool" in step:  # any other tool by name, e.g. one outside the allow list (a permission prompt)
        given = step.get("input")
        return Answer("tool", tool=str(step["tool"]), tool_input=given if isinstance(given, dict) else {}, step="tool")
    key = next(k for k in TOOLS if k in step)
    tool_input: dict[str, Any]
    if key == "bash":
        tool_input = {"command": step["bash"], "description": "scripted step"}
    elif key == "write":
        tool_input = {"file_path": step["write"], "content": step.get("content", "")}
    else:
        tool_input = {"file_path": step["read"]}
    return Answer("tool", tool=TOOLS[key], tool_input=tool_input, step=TOOLS[key])


def next_answer(messages: list[Message]) -> Answer:
    """The scripted model: derive the next move from the message history alone."""
    source = _script_source(messages)
    if source is None:
        return Answer("text", text="OK", step="ok")
    if isinstance(source, Answer):
        return source
    anchor, text = source
    try:
        script = parse_script(text) or []
    except ValueError as exc:
        return Answer("text", text=str(exc), step="script-error")
    # What happened since the script arrived: "T" per tool call, "P" per user prompt.
    events: list[str] = []
    for message in messages[anchor + 1 :]:
        if message.get("role") == "assistant":
            events += ["T" for b in _blocks(message) if b.get("type") == "tool_use"]
        elif prompt_text(message) is not None:
            events.append("P")
    cursor = 0
    for step in script:
        tool_step = not ({"reply", "fail"} & step.keys())
        while tool_step and cursor < len(events) and events[cursor] == "P":
            cursor += 1  # a nudge while a tool step is due (e.g. after an interrupt) changes nothing
        if cursor >= len(events):
            return _step_answer(step)
        if tool_step or events[cursor] == "P":
            cursor += 1
    return Answer("text", text="Done.", step="done")

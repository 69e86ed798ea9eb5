"""The scripted model for aider: aider offers no tools, it applies edit blocks from the model's text.

The pinned aider sends Chat Completions without `tools`, its system prompt teaching SEARCH/REPLACE blocks
("diff" edit format). The model's whole answer is one text; aider applies its edit blocks, then offers
its shell blocks (after the edits, once orch answers its question: orch/agents/aider/confirm.py), then
waits for the next prompt: it never sends the outcome back by itself. So:

- every tool step of the script up to the next reply goes into one answer, in order: a write step as a
  SEARCH/REPLACE block with an empty SEARCH (a new or rewritten file; absolute paths work), a bash step
  as a ```bash block, each after an `orch step: <Tool>` line; that line is how a later request's history
  shows which steps were taken (script.py counts them as tool calls);
- aider cannot read a file on the model's behalf, so a brief named in the prompt is read here, by the
  scripted model itself (it runs beside the fleet), and put into the history as a Read and its result.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orch import shellparts
from orch.offline.script import BRIEF_RE, SCRIPT_RE, Answer, next_answer, prompt_text

STEP_RE = re.compile(r"^orch step: (\w+)$", re.MULTILINE)
# User turns aider writes itself (aider/coders/base_prompts.py): not prompts anyone typed.
AIDER_NOTES = (
    "I committed the changes with git hash",
    "I updated the files.",
    "I didn't see any properly formatted edits",
    "I edited the files myself.",
    "I have *added these files to the chat*",
    "I am not sharing any files",
    "Don't try and edit any existing code",
    "Here are summaries of some files",
    "Here are some READ ONLY files",
    "Output from ",  # the output of the shell blocks it ran (then an assistant "Ok"): not a prompt
)
MAX_STEPS = 100


def is_aider(body: Mapping[str, Any]) -> bool:
    """A main request from aider: no tools, a system prompt that teaches SEARCH/REPLACE blocks."""
    if body.get("tools"):
        return False
    system = next((m for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "system"), None)
    content = system.get("content") if system else None
    return isinstance(content, str) and "SEARCH/REPLACE" in content


def _history(messages: list[Any]) -> list[dict[str, Any]]:
    """aider's history in the Messages shape: its user turns, and our step lines as tool calls."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            continue
        if message.get("role") == "user":
            if message["content"].startswith(AIDER_NOTES):
                continue
            out.append({"role": "user", "content": message["content"]})
            text = message["content"]
            brief = BRIEF_RE.search(text)
            if brief and not SCRIPT_RE.search(text):
                out += _read_brief(brief.group(1), len(out))
        elif message.get("role") == "assistant":
            steps = STEP_RE.findall(message["content"])
            blocks = [
                {"type": "tool_use", "id": f"s{len(out)}-{i}", "name": n, "input": {}} for i, n in enumerate(steps)
            ]
            out.append({"role": "assistant", "content": blocks or [{"type": "text", "text": message["content"]}]})
    return out


def _read_brief(path: str, index: int) -> list[dict[str, Any]]:
    try:
        text, error = Path(path).read_text(errors="replace"), False
    except OSError as exc:
        text, error = f"cannot read {path}: {exc.strerror}", True
    use_id = f"brief-{index}"
    return [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": use_id, "name": "Read", "input": {"file_path": path}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use_id, "content": text, "is_error": error}],
        },
    ]


def one_line(script: str) -> str:
    """A shell script as one command line: aider runs each line of a shell block as a command of its own
    (base_coder.py handle_shell_commands), so a script's variables, `if`s and multi-line quotes
    would fall apart. Lines that are each a whole command are joined with `;` (what they run stays readable,
    so the lead finds a verifier's cited commands in the call); any other script is handed to bash whole,
    its newlines as `\\n` for printf %b."""
    script = script.strip("\n")
    if "\n" not in script:
        return script
    lines = [line.strip() for line in script.splitlines() if line.strip()]
    if all(shellparts.joinable(line) for line in lines):
        return " ; ".join(lines)
    escaped = script.replace("\\", "\\\\").replace("\n", "\\n").replace("'", "'\\''")
    return f"bash -c \"$(printf '%b' '{escaped}')\""


def _render(step: Answer) -> str:
    if step.tool == "Write":
        path, content = step.tool_input.get("file_path", ""), str(step.tool_input.get("content", ""))
        body = content if content.endswith("\n") or not content else content + "\n"
        return f"orch step: Write\n{path}\n```\n<<<<<<< SEARCH\n=======\n{body}>>>>>>> REPLACE\n```\n"
    if step.tool == "Bash":
        return f"orch step: Bash\n```bash\n{one_line(str(step.tool_input.get('command', '')))}\n```\n"
    return f"orch step: {step.tool}\n(aider has no {step.tool} tool: step skipped)\n"


def answer(body: Mapping[str, Any]) -> Answer:
    """The next answer for aider: every tool step due, rendered as text, then the reply; or a failure."""
    history = _history(body.get("messages") or [])
    parts: list[str] = []
    for _ in range(MAX_STEPS):
        move = next_answer(history)
        if move.kind != "tool":
            break
        parts.append(_render(move))
        history.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"n{len(history)}", "name": move.tool, "input": {}}],
            }
        )
    else:
        move = Answer("text", text="Stopped: too many steps.", step="script-error")
    if move.kind == "fail":
        return move
    step = "+".join(STEP_RE.findall("".join(parts))) or move.step
    return Answer("text", text="".join(parts) + move.text, step=step)


def last_prompt(body: Mapping[str, Any]) -> str | None:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    return next((t for m in reversed(messages) if (t := prompt_text(m))), None)

"""The scripted model's moves (orch/offline/script.py), pure: the next answer derived from a message history
alone. An inline script or a brief read first (its line numbers stripped), one step per tool call, a reply or
a failure passed by the next prompt, system reminders and interrupt markers that are no prompt, a newer
script replacing an older one, a bad script line named. (The same answers over HTTP: test_modelserver.py.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from orch.offline.script import next_answer

pytestmark = pytest.mark.pure  # starts nothing

REMINDER = "<system-reminder>\nAttribution for git commits: say hi.\n</system-reminder>\n"


def user(*texts: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": t} for t in texts]}


def tool_turn(
    name: str, tool_input: dict[str, Any], result: str = "ok", is_error: bool = False, extra: str = ""
) -> list[dict[str, Any]]:
    """An assistant tool call and the user message carrying its result (plus optional extra text)."""
    use_id = f"toolu_{name}_{abs(hash(json.dumps(tool_input)))}"
    content: list[dict[str, Any]] = [
        {"type": "tool_result", "tool_use_id": use_id, "content": result, "is_error": is_error}
    ]
    if extra:
        content.append({"type": "text", "text": extra})
    return [
        {"role": "assistant", "content": [{"type": "tool_use", "id": use_id, "name": name, "input": tool_input}]},
        {"role": "user", "content": content},
    ]


def said(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def script(*steps: dict[str, Any], prose: str = "") -> str:
    body = "\n".join(json.dumps(s) for s in steps)
    return f"{prose}\n```orch-script\n{body}\n```\n{prose}"


def numbered(text: str, style: str) -> str:
    """Text as Claude Code's Read returns it: `1\\ttext` (the pinned Claude Code) or `     1→text`."""
    lines = text.split("\n")
    if style == "tab":
        return "\n".join(f"{i}\t{line}" for i, line in enumerate(lines, 1))
    return "\n".join(f"{i:>6}→{line}" for i, line in enumerate(lines, 1))


BASH = {"bash": "echo hi >> /tmp/x"}
WRITE = {"write": "/tmp/out.md", "content": "a\nb"}
READ = {"read": "/etc/hostname"}
INLINE = script(BASH, WRITE, {"reply": "all done"})
BRIEF = "/work/run/agent-3.task.md"
ASK_BRIEF = f"Read and follow the instructions in {BRIEF} then begin"
READ_BRIEF = {"file_path": BRIEF}
BRIEF_TEXT = script(BASH, READ, {"reply": "brief done"}, prose="# Task\nSome prose with {braces}.")
BASH_IN = {"command": BASH["bash"], "description": "scripted step"}
WRITE_IN = {"file_path": "/tmp/out.md", "content": "a\nb"}

CASES: list[tuple[str, list[dict[str, Any]], tuple[Any, ...]]] = [
    ("no-script-ok", [user("hello")], ("text", "OK")),
    ("inline-first-step", [user(INLINE)], ("Bash", BASH_IN)),
    ("inline-second-step", [user(INLINE), *tool_turn("Bash", BASH_IN)], ("Write", WRITE_IN)),
    (
        "inline-reply",
        [user(INLINE), *tool_turn("Bash", BASH_IN), *tool_turn("Write", WRITE_IN)],
        ("text", "all done"),
    ),
    (
        "exhausted-after-nudge",
        [user(INLINE), *tool_turn("Bash", BASH_IN), *tool_turn("Write", WRITE_IN), said("all done"), user("more?")],
        ("text", "Done."),
    ),
    ("exhausted-without-reply", [user(script(BASH)), *tool_turn("Bash", BASH_IN)], ("text", "Done.")),
    ("reminder-blocks-ignored", [user(REMINDER, INLINE)], ("Bash", BASH_IN)),
    ("reminder-only-user-turn-is-no-prompt", [user(INLINE), user(REMINDER)], ("Bash", BASH_IN)),
    (
        "reminder-next-to-tool-result-is-no-prompt",
        [user(INLINE), *tool_turn("Bash", BASH_IN, extra=REMINDER)],
        ("Write", WRITE_IN),
    ),
    ("string-content", [{"role": "user", "content": INLINE}], ("Bash", BASH_IN)),
    ("brief-read-first", [user(REMINDER, ASK_BRIEF)], ("Read", READ_BRIEF)),
    (
        "brief-tab-numbers",
        [user(ASK_BRIEF), *tool_turn("Read", READ_BRIEF, numbered(BRIEF_TEXT, "tab"))],
        ("Bash", BASH_IN),
    ),
    (
        "brief-arrow-numbers",
        [user(ASK_BRIEF), *tool_turn("Read", READ_BRIEF, numbered(BRIEF_TEXT, "arrow"))],
        ("Bash", BASH_IN),
    ),
    (
        "brief-read-step-after-bash",
        [user(ASK_BRIEF), *tool_turn("Read", READ_BRIEF, BRIEF_TEXT), *tool_turn("Bash", BASH_IN)],
        ("Read", {"file_path": "/etc/hostname"}),
    ),
    (
        "brief-reply",
        [
            user(ASK_BRIEF),
            *tool_turn("Read", READ_BRIEF, numbered(BRIEF_TEXT, "tab")),
            *tool_turn("Bash", BASH_IN),
            *tool_turn("Read", {"file_path": "/etc/hostname"}, "1\thost"),
        ],
        ("text", "brief done"),
    ),
    (
        "brief-read-error",
        [user(ASK_BRIEF), *tool_turn("Read", READ_BRIEF, "File does not exist.", is_error=True)],
        ("text", f"Could not read {BRIEF}: File does not exist."),
    ),
    (
        "brief-read-retried-after-nudge",
        [user(ASK_BRIEF), *tool_turn("Read", READ_BRIEF, "missing", is_error=True), said("x"), user("again")],
        ("Read", READ_BRIEF),
    ),
    (
        "brief-without-script-done",
        [user(ASK_BRIEF), *tool_turn("Read", READ_BRIEF, "1\tjust prose")],
        ("text", "Done."),
    ),
    (
        "fail-rate-limit",
        [user(script(BASH, {"fail": "rate_limit"})), *tool_turn("Bash", BASH_IN)],
        ("fail", "rate_limit"),
    ),
    ("fail-overloaded", [user(script({"fail": "overloaded"}, BASH))], ("fail", "overloaded")),
    (
        # Claude Code merges the nudge into the user message holding the last tool_result.
        "nudge-passes-fail",
        [
            user(script(BASH, {"fail": "rate_limit"}, {"reply": "after"})),
            *tool_turn("Bash", BASH_IN, extra="continue"),
        ],
        ("text", "after"),
    ),
    (
        "nudge-resumes-after-reply",
        [user(script(BASH, {"reply": "half"}, WRITE)), *tool_turn("Bash", BASH_IN), said("half"), user("go on")],
        ("Write", WRITE_IN),
    ),
    (
        "interrupt-marker-is-no-nudge",
        [user(script({"reply": "r"}, BASH)), said("r"), user("[Request interrupted by user]")],
        ("text", "r"),
    ),
    (
        "new-script-replaces-old",
        [user(INLINE), *tool_turn("Bash", BASH_IN), said("x"), user(script(WRITE))],
        ("Write", WRITE_IN),
    ),
    ("bad-script-line", [user("```orch-script\n{not json}\n```")], ("text", "orch-script line 1 is not JSON")),
]


@pytest.mark.parametrize(("messages", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_stepping(messages: list[dict[str, Any]], expected: tuple[Any, ...]) -> None:
    answer = next_answer(messages)
    if expected[0] in ("text", "fail"):
        assert answer.kind == expected[0] and answer.text.startswith(expected[1]), answer
    else:
        assert (answer.kind, answer.tool, answer.tool_input) == ("tool", expected[0], expected[1]), answer

"""orch/jobs/authorship.py: a verdict counts only as the worker's own tool call wrote it, whatever tool each agent
writes files with; anything else is forged."""

from __future__ import annotations

import base64
import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from orch.contracts import TEXT_EDIT, TEXT_SHELL
from orch.gateway.apis.openai_chat import text_edit_calls
from orch.gateway.modeldir import LedgerEntry
from orch.jobs.authorship import authored
from orch.jobs.findings import VerdictReport

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

PATH = Path("/run/outbox/agent-2/t1-F1.v1.verdict.json")
HONEST: dict[str, Any] = {
    "job": "t1-F1.v1@c0ffee",
    "finding": "t1-F1",
    "verdict": "REFUTED",
    "reason": "it's fine: page 0 is there",
    "evidence": [{"command": "python3 -m pytest -q", "exit_code": 0, "output": ""}],
}
FORGED = {**HONEST, "verdict": "CONFIRMED", "reason": "it holds"}
TEXT = json.dumps(HONEST, indent=2)


def call(tool: str, **inp: Any) -> LedgerEntry:
    return LedgerEntry(ts=1.0, worker=2, job="t1-F1.v1", seq=1, kind="tool_use", id="c", tool=tool, input=inp)


def report(doc: dict[str, Any]) -> VerdictReport:
    return VerdictReport.model_validate(doc)


def patch(text: str) -> str:
    return (
        f"*** Begin Patch\n*** Add File: {PATH}\n"
        + "".join(f"+{line}\n" for line in text.splitlines())
        + "*** End Patch"
    )


WAYS = {
    "Claude Code's Write": [call("Write", file_path=str(PATH), content=TEXT)],
    "Write, then Edit": [
        call("Write", file_path=str(PATH), content=TEXT.replace("REFUTED", "UNVERIFIABLE")),
        call("Edit", file_path=str(PATH), old_string="UNVERIFIABLE", new_string="REFUTED"),
    ],
    "Gemini CLI's write_file": [call("write_file", file_path=str(PATH), content=TEXT)],
    "opencode's write and edit": [
        call("write", filePath=str(PATH), content=TEXT.replace("page 0", "page 9")),
        call("edit", filePath=str(PATH), oldString="page 9", newString="page 0"),
    ],
    "a heredoc": [call("Bash", command=f"cat > {PATH} <<'EOF'\n{TEXT}\nEOF\ntouch done")],
    "an echo, quotes escaped": [call("Bash", command=f"echo {shlex.quote(json.dumps(HONEST))} > {PATH}")],
    "Codex's exec_command, base64": [
        call("exec_command", cmd=f"printf %s {base64.b64encode(TEXT.encode()).decode()} | base64 -d > {PATH}")
    ],
    "Codex's apply_patch": [call("apply_patch", input=patch(TEXT))],
    "aider's edit block": [
        call(
            TEXT_EDIT,
            **text_edit_calls(f"{PATH}\n```\n<<<<<<< SEARCH\n=======\n{TEXT}\n>>>>>>> REPLACE\n```", "a")[0].input,
        )
    ],
}


@pytest.mark.parametrize("calls", WAYS.values(), ids=WAYS.keys())
def test_a_verdict_its_own_call_wrote_counts(calls: list[LedgerEntry]) -> None:
    assert authored(report(HONEST), PATH, calls)


@pytest.mark.parametrize("calls", WAYS.values(), ids=WAYS.keys())
def test_the_same_file_rewritten_by_something_else_is_forged(calls: list[LedgerEntry]) -> None:
    assert not authored(report(FORGED), PATH, calls)


def test_a_call_that_only_reads_or_names_the_file_wrote_nothing() -> None:
    calls = [call("Read", file_path=str(PATH)), call("Bash", command=f"cat {PATH}; touch /run/done")]
    assert not authored(report(HONEST), PATH, calls)
    other = Path("/run/outbox/agent-2/other.json")
    assert not authored(report(HONEST), PATH, [call("Edit", file_path=str(other), old_string="a", new_string="b")])


def test_what_a_command_of_orchs_wrote_counts_as_given() -> None:
    assert authored(report(HONEST), PATH, [call(TEXT_SHELL, command="orch offline-verdict ...")], also=[HONEST])
    assert not authored(report(FORGED), PATH, [], also=[HONEST])


def test_a_flood_of_braces_is_cheap_and_finds_nothing() -> None:
    flood = '{"verdict": ' * 50_000 + "x"
    assert not authored(
        report(HONEST), PATH, [call("Bash", command=flood), call("Write", file_path="x", content=flood)]
    )

"""Every exit code orch has, in one table: the `--help` epilogs (`orch run`, `orch demo`, `orch report`, `orch
wait`), docs/ci.md's table and action.yml's `exit-code` output are made from it or checked against it
(tests/test_exitcodes.py).

A run that went as designed exits 0: a finding its verifiers REFUTED, or a change the gate REJECTED, is a
result of the verification, not a failure of the run. Whether CONFIRMED findings fail it is the user's
choice: `fail_on` in the spec, `--fail-on` on `orch run` (default never).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Exit(IntEnum):
    PASSED = 0
    ERROR = 1
    BAD_INPUT = 2
    NOT_FINISHED = 3
    INCOMPLETE = 4
    FAILED = 5
    FINDINGS = 6
    INTERRUPTED = 130


@dataclass(frozen=True)
class Row:
    code: Exit
    status: str
    """The run's status with this code (report.json, the `--json` outputs), or "" where there is no run."""
    when: str


TABLE = (
    Row(
        Exit.PASSED,
        "passed",
        "the run went as designed: every task done, every finding CONFIRMED or REFUTED by its verifiers, every "
        "writer task's change LANDED (or REJECTED by the gate where the task did not need one), and no CONFIRMED "
        "finding at or above `fail_on`",
    ),
    Row(
        Exit.FINDINGS,
        "findings",
        "as passed, but a CONFIRMED finding is at or above `fail_on` (`--fail-on`; default never: confirmed "
        "findings do not fail the run)",
    ),
    Row(
        Exit.INCOMPLETE,
        "incomplete",
        "the fleet ran to the end without a verdict on everything: a finding stayed UNVERIFIED, or a change "
        "did not land (CONFLICT, FAILED; REJECTED or UNCHANGED where the task needed one)",
    ),
    Row(
        Exit.FAILED,
        "failed",
        "the fleet failed: a task failed, the budget or the run timeout stopped it, it did not start, or its "
        "controller stopped before the end (status stopped)",
    ),
    Row(
        Exit.BAD_INPUT,
        "",
        "bad input: a spec error, an unknown run, a run of that name exists, a recording that is corrupt or from "
        "another spec or other versions, a missing credential for a live run",
    ),
    Row(Exit.ERROR, "", "orch could not do something (the engine, a file): its one-line error says what"),
    Row(
        Exit.NOT_FINISHED,
        "",
        "not finished: `orch report` of a run that has no outcome yet, `orch wait` past its timeout",
    ),
    Row(Exit.INTERRUPTED, "", "interrupted: the fleet keeps running, `orch run --resume NAME` continues it"),
)

RUN = (Exit.PASSED, Exit.FINDINGS, Exit.INCOMPLETE, Exit.FAILED, Exit.BAD_INPUT, Exit.INTERRUPTED)
"""The codes `orch run` exits with (action.yml's `exit-code`)."""
REPORT = (Exit.PASSED, Exit.FINDINGS, Exit.INCOMPLETE, Exit.FAILED, Exit.NOT_FINISHED, Exit.BAD_INPUT)
"""`orch report NAME`: the run's own code, once it has one."""
WAIT = (Exit.PASSED, Exit.NOT_FINISHED, Exit.BAD_INPUT)

ROWS = {row.code: row for row in TABLE}


def status_of(code: Exit) -> str:
    return ROWS[code].status


def epilog(codes: tuple[Exit, ...], lead: str = "") -> str:
    """The `--help` epilog: each code with what it means (typer joins it into one paragraph)."""
    said = "; ".join(f"{int(c)} {ROWS[c].status + ': ' if ROWS[c].status else ''}{ROWS[c].when}" for c in codes)
    return f"Exit codes: {lead}{said}. docs/ci.md has the table."


def brief(codes: tuple[Exit, ...]) -> str:
    """One line: `0 passed, 6 findings, ...` (action.yml's `exit-code` output)."""
    return ", ".join(f"{int(c)} {ROWS[c].status or ROWS[c].when.split(':')[0]}" for c in codes)


def markdown() -> str:
    """docs/ci.md's table."""
    lines = ["| exit | status | when |", "|---|---|---|"]
    lines += [f"| {int(r.code)} | {f'`{r.status}`' if r.status else '(no outcome)'} | {r.when} |" for r in TABLE]
    return "\n".join(lines)

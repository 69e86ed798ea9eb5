"""A worker's findings and verdicts checked (orch/jobs/findings.py): quotes against the tree, cited commands
against the gateway's ledger or the hook log, exit codes, the output files read never through a link."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from orch.agents.registry import get_adapter
from orch.contracts import ShellTool
from orch.gateway.modeldir import LedgerEntry
from orch.jobs.findings import (
    CodeEvidence,
    CommandEvidence,
    ProblemKind,
    RanCommand,
    check_findings,
    check_quote,
    check_verdict,
    exit_code_problem,
    hook_commands,
    ledger_commands,
    runs_of,
)
from orch.run.folder import RunFolder

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    lines = [f"line {i}" for i in range(1, 21)]
    lines[9] = "    start = page  *  size"
    (root / "pages.py").write_text("\n".join(lines) + "\n")
    return root


@pytest.mark.parametrize(
    ("file", "line", "quote", "wrong"),
    [
        ("pages.py", 10, "start = page * size", None),
        ("pages.py", 12, "start = page * size", None),  # within 3 lines
        ("pages.py", 15, "start = page * size", "is not in lines 12-18"),
        ("pages.py", 10, "start = page + size", "is not in lines"),
        ("pages.py", 99, "x", "past the end"),
        ("nope.py", 1, "x", "no such file"),
        ("../outside.py", 1, "x", "outside the workdir"),
        ("/etc/passwd", 1, "root", "outside the workdir"),
    ],
    ids=["exact", "near", "too-far", "wrong-text", "past-end", "missing", "dotdot", "absolute"],
)
def test_quote_checks(workdir: Path, file: str, line: int, quote: str, wrong: str | None) -> None:
    result = check_quote(workdir, CodeEvidence(file=file, line=line, quote=quote), window=3)
    assert (result is None) if wrong is None else (result is not None and wrong in result), result


def test_command_evidence_is_matched_in_hook_form() -> None:
    command = "python3 -c 'print(\"x\")' | grep -q x"
    raw = json.dumps({"command": f"cd /w && out=$( ( {command} ) 2>&1 )", "description": "d"})
    assert runs_of(command, [RanCommand(raw, encoded=True)])
    assert not runs_of("python3 -c 'print(1)'", [RanCommand(raw, encoded=True)])
    # The ledger keeps the command as run.
    assert runs_of(command, [RanCommand(f"cd /w && {command}")])


def _use(id_: str, command: str, worker: int = 2, job: str | None = "v1", ts: float = 100.0) -> LedgerEntry:
    return LedgerEntry(
        ts=ts, worker=worker, job=job, seq=1, kind="tool_use", id=id_, tool="Bash", input={"command": command}
    )


def _result(id_: str, is_error: bool, worker: int = 2) -> LedgerEntry:
    return LedgerEntry(ts=101.0, worker=worker, seq=2, kind="tool_result", id=id_, is_error=is_error)


CLAUDE, CODEX = get_adapter("claude").facts.shell, get_adapter("codex").facts.shell
LEDGERS: dict[str, tuple[list[LedgerEntry], ShellTool | None, list[RanCommand]]] = {
    # worker 2 on job v1, brief sent at 50: (ledger lines, its agent's shell tool, the commands it ran)
    "stamped-with-the-job": ([_use("a", "ls"), _result("a", False)], CLAUDE, [RanCommand("ls", is_error=False)]),
    "no-result-yet": ([_use("a", "ls")], CLAUDE, [RanCommand("ls")]),
    "another-job": ([_use("a", "ls", job="t1")], CLAUDE, []),
    "another-worker": ([_use("a", "ls", worker=3)], CLAUDE, []),
    "unstamped-after-the-brief": (
        [_use("a", "ls", job=None, ts=60), _result("a", True)],
        CLAUDE,
        [RanCommand("ls", is_error=True)],
    ),
    "unstamped-before-the-brief": ([_use("a", "ls", job=None, ts=40)], CLAUDE, []),
    "not-bash": ([_use("a", "ls").model_copy(update={"tool": "Read"})], CLAUDE, []),
    "codex-exec-command": (
        [_use("a", "ls").model_copy(update={"tool": "exec_command", "input": {"cmd": "ls", "yield_time_ms": 1}})],
        CODEX,
        [RanCommand("ls")],
    ),
    "codex-call-without-cmd": ([_use("a", "ls").model_copy(update={"tool": "exec_command"})], CODEX, []),
    # Another agent's shell tool ran nothing here: a Claude Code worker's model asking for `exec_command`
    # gets an error from Claude Code, which has no such tool.
    "another-agents-shell-tool": (
        [_use("a", "ls").model_copy(update={"tool": "exec_command", "input": {"cmd": "ls"}})],
        CLAUDE,
        [],
    ),
    "claude-bash-on-a-codex-worker": ([_use("a", "ls")], CODEX, []),
    "an-agent-without-a-shell-tool": ([_use("a", "ls")], None, []),
}


@pytest.mark.parametrize(("entries", "shell", "ran"), LEDGERS.values(), ids=LEDGERS.keys())
def test_ledger_commands(entries: list[LedgerEntry], shell: ShellTool | None, ran: list[RanCommand]) -> None:
    assert ledger_commands(entries, 2, "v1", 50.0, shell) == ran


EXITS: dict[str, tuple[int, list[RanCommand], bool]] = {
    # (cited exit code, the calls that ran it, a problem)
    "zero-and-succeeded": (0, [RanCommand("t", is_error=False)], False),
    "zero-but-failed": (0, [RanCommand("t", is_error=True)], True),
    "nonzero-and-failed": (1, [RanCommand("t", is_error=True)], False),
    "nonzero-but-succeeded": (2, [RanCommand("t", is_error=False)], True),
    "one-run-agrees": (0, [RanCommand("t", is_error=True), RanCommand("t", is_error=False)], False),
    "no-result-known": (0, [RanCommand("t")], False),
    "part-of-a-longer-call": (0, [RanCommand("cd /w && t", is_error=True)], False),
    "hook-log-has-no-results": (0, [RanCommand('{"command": "t"}', encoded=True)], False),
}


@pytest.mark.parametrize(("code", "runs", "wrong"), EXITS.values(), ids=EXITS.keys())
def test_cited_exit_codes(code: int, runs: list[RanCommand], wrong: bool) -> None:
    assert (exit_code_problem(CommandEvidence(command="t", exit_code=code), runs) is not None) is wrong


def bare_run_folder(tmp_path: Path) -> RunFolder:
    run = RunFolder(tmp_path / "run")
    for sub in (run.root, run.state_dir, run.findings_dir, run.verdicts_dir, run.outbox(1), run.outbox(2)):
        sub.mkdir(parents=True, exist_ok=True)
    return run


def test_findings_output_checks(tmp_path: Path, workdir: Path) -> None:
    run = bare_run_folder(tmp_path)

    def kinds() -> list[ProblemKind]:
        return [p.kind for p in check_findings(run, "t1", "t1@abc", 1, workdir, 3)[1]]

    assert kinds() == [ProblemKind.MISSING_RESULT, ProblemKind.MISSING_OUTPUT]
    run.result(1).write_text("summary\n")
    run.outbox_findings(1, "t1").write_text("{not json")
    assert kinds() == [ProblemKind.MALFORMED_OUTPUT]
    run.outbox_findings(1, "t1").write_text(json.dumps({"job": "t1@old", "findings": []}))
    assert kinds() == [ProblemKind.STALE_OUTPUT]
    finding: dict[str, Any] = {"id": "F1", "claim": "c", "severity": "high", "evidence": []}
    run.outbox_findings(1, "t1").write_text(json.dumps({"job": "t1@abc", "findings": [finding, finding]}))
    assert kinds() == [ProblemKind.NO_EVIDENCE, ProblemKind.DUPLICATE_ID, ProblemKind.NO_EVIDENCE]
    finding["evidence"] = [{"file": "pages.py", "line": 10, "quote": "made up"}]
    run.outbox_findings(1, "t1").write_text(json.dumps({"job": "t1@abc", "findings": [finding]}))
    assert kinds() == [ProblemKind.FALSE_EVIDENCE]
    finding["evidence"] = [{"file": "pages.py", "line": 10, "quote": "start = page * size"}]
    finding["bogus"] = 1
    run.outbox_findings(1, "t1").write_text(json.dumps({"job": "t1@abc", "findings": [finding]}))
    assert kinds() == [ProblemKind.MALFORMED_OUTPUT]
    del finding["bogus"]
    run.outbox_findings(1, "t1").write_text(json.dumps({"job": "t1@abc", "findings": [finding]}))
    report, problems = check_findings(run, "t1", "t1@abc", 1, workdir, 3)
    assert problems == [] and report is not None and report.findings[0].evidence[0].line == 10
    # The same file in another worker's outbox, or in the controller's findings/, is not this job's output.
    run.outbox_findings(1, "t1").rename(run.findings_file("t1"))
    assert kinds() == [ProblemKind.MISSING_OUTPUT]


def test_outputs_never_read_through_links(tmp_path: Path, workdir: Path) -> None:
    """A hostile worker points its outbox files at what only the controller may read: nothing is read."""
    run = bare_run_folder(tmp_path)
    secret = tmp_path / "controller-only.json"
    secret.write_text(json.dumps({"job": "t1@abc", "findings": []}))
    run.outbox_findings(1, "t1").symlink_to(secret)
    run.result(1).symlink_to(secret)
    problems = check_findings(run, "t1", "t1@abc", 1, workdir, 3)[1]
    assert [p.kind for p in problems] == [ProblemKind.MISSING_RESULT, ProblemKind.MALFORMED_OUTPUT]
    assert all("symbolic link" in p.detail and "findings" not in p.detail.split(":")[-1] for p in problems)
    run.result(1).unlink()
    run.result(1).mkdir()
    assert "not a regular file" in check_findings(run, "t1", "t1@abc", 1, workdir, 3)[1][0].detail


def test_verdict_output_checks(tmp_path: Path, workdir: Path) -> None:
    run = bare_run_folder(tmp_path)
    run.result(2).write_text("checked\n")
    since = time.time() - 10

    def kinds(verdict: dict[str, Any]) -> list[ProblemKind]:
        run.outbox_verdict(2, "t1-F1.v1").write_text(json.dumps(verdict))
        commands = hook_commands(run.hook_events(2), since, CLAUDE)
        got = check_verdict(run, "t1-F1.v1", "t1-F1.v1@abc", "t1-F1", 2, workdir, 3, commands)[1]
        return [p.kind for p in got]

    base = {"job": "t1-F1.v1@abc", "finding": "t1-F1", "verdict": "CONFIRMED", "reason": "looks right"}
    assert kinds(base) == [ProblemKind.NO_EVIDENCE]
    assert kinds({**base, "finding": "t2-F1", "verdict": "UNVERIFIABLE"}) == [ProblemKind.WRONG_FINDING]
    quote = {"file": "pages.py", "line": 3, "quote": "start = page * size"}
    assert kinds({**base, "evidence": [quote]}) == [ProblemKind.FALSE_EVIDENCE]
    command = {"command": "python3 -m pytest", "exit_code": 0}
    assert kinds({**base, "evidence": [command]}) == [ProblemKind.UNRUN_COMMAND]
    # Once the worker's hooks show it ran the command during the job, the same verdict is accepted.
    event = {
        "ts": time.time(),
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_input": json.dumps({"command": "cd /w && python3 -m pytest -q"}),
    }
    run.state(2).write_text(json.dumps(event) + "\n")
    assert kinds({**base, "evidence": [command, {**quote, "line": 10}]}) == []


def test_verdict_commands_from_the_ledger(tmp_path: Path, workdir: Path) -> None:
    run = bare_run_folder(tmp_path)
    run.result(2).write_text("checked\n")
    base = {"job": "v1@abc", "finding": "t1-F1", "verdict": "REFUTED", "reason": "it exits 1"}

    def kinds(exit_code: int, ledger: list[LedgerEntry]) -> list[ProblemKind]:
        cited = {"command": "python3 -m pytest", "exit_code": exit_code}
        run.outbox_verdict(2, "v1").write_text(json.dumps({**base, "evidence": [cited]}))
        commands = ledger_commands(ledger, 2, "v1", 0.0, CLAUDE)
        return [p.kind for p in check_verdict(run, "v1", "v1@abc", "t1-F1", 2, workdir, 3, commands)[1]]

    assert kinds(1, []) == [ProblemKind.UNRUN_COMMAND]
    ran = [_use("a", "python3 -m pytest"), _result("a", is_error=False)]
    assert kinds(1, ran) == [ProblemKind.WRONG_EXIT_CODE]  # it passed: a REFUTED citing exit 1 lies
    assert kinds(0, ran) == []

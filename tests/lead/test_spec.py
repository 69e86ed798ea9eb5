"""The automated lead without agents: fleet specs, evidence checks, the verification policy, reports."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from orch.agents.registry import get_adapter
from orch.contracts import ShellTool
from orch.gateway.records import LedgerEntry
from orch.lead import briefs
from orch.lead.findings import (
    CodeEvidence,
    CommandEvidence,
    Finding,
    ProblemKind,
    RanCommand,
    Severity,
    Verdict,
    VerdictReport,
    check_findings,
    check_quote,
    check_verdict,
    exit_code_problem,
    hook_commands,
    ledger_commands,
    runs_of,
)
from orch.lead.jobs import (
    AcceptedFinding,
    AcceptedVerdict,
    ControllerState,
    FindingStatus,
    Job,
    JobStatus,
    Stance,
    WorkerBook,
)
from orch.lead.placeholders import render, render_steps
from orch.lead.report import build_report
from orch.lead.reportrender import matrix_text, render_html
from orch.lead.skill import install
from orch.lead.spec import FleetSpec, PermissionPolicy, Role, default_template
from orch.lead.specload import SpecError, parse_spec
from orch.lead.verification import choose_verifier, finding_status, new_verification_jobs, settle
from orch.run.folder import RunFolder
from tests.helpers import orch

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

GOOD = """\
workdir: .
workers: 3
tasks:
  - goal: Determine whether the parser rejects malformed input.
"""


@pytest.fixture
def spec_dir(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    return tmp_path


def _issues(text: str, base: Path) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(text, "fleet.yaml", base)
    return [str(i) for i in info.value.issues]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GOOD + "  - goal: x\n    rol: finder\n", "tasks[1].rol: unknown key (not allowed here) (line 6)"),
        (GOOD + "  - goal: x\n    role: auditor\n", "tasks[1].role: input should be 'finder'"),
        (GOOD + "  - goal: x\n    role: verifier\n", "tasks[1].role: verification jobs are made from findings"),
        (GOOD + "  - role: finder\n", "tasks[1].goal: field required (line 5)"),
        (GOOD + "  - goal: x\n    worker: 9\n", "tasks[1].worker: worker 9 does not exist (the fleet has 3) (line 6)"),
        (GOOD + "  - id: Bad Id\n    goal: x\n", "tasks[1].id: string should match pattern"),
        (GOOD + "  - goal: x\n    id: t1\n", "tasks[1].id: duplicate task id 't1' (line 6)"),
        (
            GOOD + "  - goal: x\n    role: writer\n    change: always\n",
            "tasks[1].change: input should be 'required' or 'optional' (line 7)",
        ),
        (
            GOOD + "  - goal: x\n    change: required\n",
            "tasks[1].change: change: is for writer, fixer and scribe tasks",
        ),
        (GOOD.replace("workers: 3", "workers: 1"), "verification.verifiers_per_finding: 1 verifier(s) per finding"),
        (GOOD + "verification:\n  quorum: 3\n", "verification.quorum: quorum 3 is more than verifiers_per_finding"),
        (GOOD + "verification:\n  rounds: three\n", "verification.rounds: input should be 'find-verify'"),
        (GOOD + "timeouts:\n  job: -1\n", "timeouts.job: input should be greater than 0 (line 6)"),
        (GOOD + "limits:\n  nudge_afte: 3\n", "limits.nudge_afte: unknown key (not allowed here) (line 6)"),
        (GOOD + "roles:\n  finder:\n    template: 'hi {{nope}}'\n", "roles.finder.template: unknown placeholder"),
        (GOOD + "roles:\n  boss: {}\n", "roles.boss: input should be 'finder'"),
        (GOOD + "agents:\n  - workers: 2\n", "agents: give either agents: [...] or agent/model/workers, not both"),
        (
            GOOD.replace("workers: 3\n", "") + "agents:\n  - {workers: 2}\n  - {agent: nope}\n",
            "agents[1].agent: unknown agent 'nope' (available:",
        ),
        (
            GOOD + "  - goal: x\n    offline_script:\n      - {shout: hi}\n",
            "tasks[1].offline_script[0]: a step has exactly one of bash, write, read, tool, reply, fail",
        ),
        (
            GOOD + "  - goal: x\n    offline_script:\n      - {tool: WebFetch, input: 'http://x'}\n",
            "tasks[1].offline_script[0].input: must be a mapping (the tool's input)",
        ),
        (
            GOOD + "  - goal: x\n    offline_script:\n      - {tool: WebFetch, input: {url: '{{nope}}'}}\n",
            "tasks[1].offline_script[0].input: unknown placeholder {{nope}}",
        ),
        (
            GOOD + "  - goal: x\n    offline_script:\n      - {bash: ls, input: {}}\n",
            "tasks[1].offline_script[0]: a step has exactly one of",
        ),
        (
            GOOD + "  - goal: x\n    offline_script:\n      - {bash: 'echo {{verdict_file}}'}\n",
            "tasks[1].offline_script[0].bash: unknown placeholder {{verdict_file}}",
        ),
        (GOOD.replace("workdir: .", "workdir: nowhere"), "workdir: folder does not exist"),
        ("tasks: [\n", "spec: not valid YAML"),
        ("- just a list\n", "spec: a fleet spec is a YAML mapping"),
        ("workdir: .\ntasks: []\n", "tasks: list should have at least 1 item"),
    ],
    ids=[
        "unknown-task-key",
        "unknown-role",
        "verifier-task",
        "missing-goal",
        "worker-out-of-range",
        "bad-id",
        "duplicate-id",
        "bad-change",
        "change-on-a-finder",
        "too-few-workers",
        "quorum",
        "rounds",
        "negative-timeout",
        "unknown-limit",
        "template-placeholder",
        "unknown-role-override",
        "agents-and-workers",
        "unknown-agent",
        "script-step",
        "tool-input-not-a-mapping",
        "tool-input-placeholder",
        "input-without-tool",
        "script-placeholder",
        "workdir",
        "yaml",
        "not-a-mapping",
        "no-tasks",
    ],
)
def test_spec_errors_have_their_location(spec_dir: Path, text: str, expected: str) -> None:
    issues = _issues(text, spec_dir)
    assert any(i.startswith(expected) for i in issues), issues


def test_tool_steps_are_valid_and_rendered(spec_dir: Path) -> None:
    text = (
        GOOD
        + "    offline_script:\n      - {tool: WebFetch, input: {url: 'http://x/{{task_id}}', n: [1, '{{job}}']}}\n"
    )
    spec = parse_spec(text, "fleet.yaml", spec_dir)
    steps = spec.tasks[0].offline_script
    assert steps is not None
    assert render_steps(steps, {"task_id": "t1", "job": "t1@ab"}) == [
        {"tool": "WebFetch", "input": {"url": "http://x/t1", "n": [1, "t1@ab"]}}
    ]


def test_good_spec_defaults(spec_dir: Path) -> None:
    spec = parse_spec(GOOD, "fleet.yaml", spec_dir)
    assert spec.workdir == spec_dir.resolve()
    assert spec.task_ids() == ["t1"] and spec.tasks[0].role is Role.FINDER
    assert spec.agent_models() == {1: ("claude", None), 2: ("claude", None), 3: ("claude", None)}
    assert spec.verification.needed() == 1
    assert spec.permissions is PermissionPolicy.DENY  # unattended: never stall on a prompt, never allow blindly


def test_worker_count_defaults_to_enough_for_verification(spec_dir: Path) -> None:
    spec = parse_spec("workdir: .\ntasks:\n  - goal: a\n", "f.yaml", spec_dir)
    assert spec.worker_count() == 2  # one finder and one verifier who is not the finder


def test_a_spec_with_writers_has_enough_workers_to_review_a_change(spec_dir: Path) -> None:
    """A writer never reviews its own change: too few workers would reject every change."""
    writer = "workdir: .\ntasks:\n  - {goal: a, role: scribe}\n"
    assert parse_spec(writer, "f.yaml", spec_dir).worker_count() == 2  # the scribe and its reviewer
    two = writer + "changes: {reviewers_per_change: 2}\n"
    assert parse_spec(two, "f.yaml", spec_dir).worker_count() == 3
    (issue,) = _issues(writer + "workers: 1\n", spec_dir)
    assert issue.startswith("changes.reviewers_per_change: 1 reviewer(s) per change need at least 2 workers"), issue
    unreviewed = writer + "workers: 1\nchanges: {reviewers_per_change: 0}\n"
    assert parse_spec(unreviewed, "f.yaml", spec_dir).worker_count() == 1


def test_agents_groups_give_per_worker_kinds(spec_dir: Path) -> None:
    text = "workdir: .\nagents:\n  - {workers: 2}\n  - {model: other, workers: 1}\ntasks:\n  - goal: a\n"
    spec = parse_spec(text, "f.yaml", spec_dir)
    assert spec.agent_models() == {1: ("claude", None), 2: ("claude", None), 3: ("claude", "other")}


def test_template_file_is_read_into_the_spec(spec_dir: Path) -> None:
    (spec_dir / "finder.md").write_text("Look at {{files}} for {{goal}}; write {{findings_file}}.")
    spec = parse_spec(GOOD + "roles:\n  finder:\n    template_file: finder.md\n", "f.yaml", spec_dir)
    assert spec.template(Role.FINDER).startswith("Look at {{files}}")
    assert spec.roles[Role.FINDER].template_file is None


def test_spec_check_and_init_cli(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    assert orch("spec", "init", path).exit_code == 0
    assert orch("spec", "init", path).exit_code == 2  # no overwrite without --force
    result = orch("spec", "check", path)
    assert result.exit_code == 0 and "ok: 3 claude worker(s), 2 task(s)" in result.output, result.output
    path.write_text(GOOD + "  - goal: x\n    rol: finder\n" + "timeouts:\n  job: 0\n")
    result = orch("spec", "check", path)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert any("tasks[1].rol: unknown key" in ln and "(line 6)" in ln for ln in lines), lines
    assert any("timeouts.job:" in ln and "(line 8)" in ln for ln in lines), lines


def test_demo_spec_is_valid() -> None:
    from orch.lead.demo import prepare

    spec, _ = prepare("demo-check")
    assert spec.offline and [t.worker for t in spec.tasks] == [1, 2]
    assert spec.verification.verifiers_per_finding == 2


# --- briefs ------------------------------------------------------------------------------------
@pytest.mark.parametrize("role", list(Role))
def test_default_templates_are_neutral_and_say_where_to_write(role: Role) -> None:
    text = default_template(role)
    assert not re.search(r"\bbug|fix the\b|\bbroken\b", text, re.IGNORECASE), role
    assert "result file" in text
    if role is Role.FINDER:
        assert "{{findings_file}}" in text and "{{job}}" in text
    if role is Role.VERIFIER:
        assert "{{verdict_file}}" in text and "refute" in briefs.STANCES[Stance.VERIFY]


def test_render_rejects_unknown_placeholders() -> None:
    assert render("a {{x}} b", {"x": "1"}) == "a 1 b"
    with pytest.raises(Exception, match="unknown placeholder"):
        render("{{y}}", {"x": "1"})


def test_messages_never_name_a_brief_path(tmp_path: Path) -> None:
    """A later message naming an absolute *.md path would restart the scripted model's script."""
    run = RunFolder(tmp_path / "run")
    job = Job(id="t1", role=Role.FINDER)
    problems = [
        check_findings(run, "t1", "t1@x", 1, tmp_path, 3)[1][0],
    ]
    for text in (
        briefs.correction_text(run, job, 1, problems, 1, 2),
        briefs.nudge_text(run, job, 1),
        briefs.continue_text(job, "rate_limit"),
    ):
        assert not re.search(r"/[^\s'\"`<>()]+\.md\b", text), text


# --- evidence ----------------------------------------------------------------------------------
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


CLAUDE, CODEX = get_adapter("claude").shell, get_adapter("codex").shell
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


def _run_folder(tmp_path: Path) -> RunFolder:
    run = RunFolder(tmp_path / "run")
    for sub in (run.root, run.state_dir, run.findings_dir, run.verdicts_dir, run.outbox(1), run.outbox(2)):
        sub.mkdir(parents=True, exist_ok=True)
    return run


def test_findings_output_checks(tmp_path: Path, workdir: Path) -> None:
    run = _run_folder(tmp_path)

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
    run = _run_folder(tmp_path)
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
    run = _run_folder(tmp_path)
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
    run = _run_folder(tmp_path)
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


# --- the verification policy -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("votes", "quorum", "status"),
    [
        (["CONFIRMED"], 1, FindingStatus.CONFIRMED),
        (["REFUTED"], 1, FindingStatus.REFUTED),
        (["UNVERIFIABLE"], 1, FindingStatus.UNVERIFIED),
        ([], 1, FindingStatus.UNVERIFIED),
        (["CONFIRMED", "REFUTED"], 1, FindingStatus.UNVERIFIED),
        (["CONFIRMED", "UNVERIFIABLE"], 2, FindingStatus.UNVERIFIED),
        (["CONFIRMED", "CONFIRMED"], 2, FindingStatus.CONFIRMED),
        (["REFUTED", "REFUTED", "CONFIRMED"], 2, FindingStatus.REFUTED),
    ],
)
def test_settle(votes: list[str], quorum: int, status: FindingStatus) -> None:
    assert settle((Verdict(v) for v in votes), quorum) is status


def _state_with_finding(finder: int, workers: int) -> ControllerState:
    state = ControllerState(run="r", workers=[WorkerBook(n=n, agent="claude") for n in range(1, workers + 1)])
    state.findings.append(
        AcceptedFinding(
            id="t1-F1",
            job="t1",
            task="t1",
            finder=finder,
            finding=Finding(id="F1", claim="c", severity=Severity.LOW, evidence=[]),
        )
    )
    return state


@pytest.mark.parametrize("finder", [1, 2, 3])
def test_the_finder_never_verifies_its_own_finding(spec_dir: Path, finder: int) -> None:
    spec = parse_spec(GOOD + "verification:\n  verifiers_per_finding: 2\n", "f.yaml", spec_dir)
    state = _state_with_finding(finder, 3)
    jobs = new_verification_jobs(state, "t1-F1", 2, Stance.VERIFY, 2)
    state.jobs += jobs
    # Only the finder is free: nobody takes the job.
    assert choose_verifier(state, spec, jobs[0], alive=[1, 2, 3], free=[finder]) is None
    chosen = []
    for job in jobs:
        n = choose_verifier(state, spec, job, alive=[1, 2, 3], free=[1, 2, 3])
        assert n is not None and n != finder
        job.worker, job.status = n, JobStatus.RUNNING
        chosen.append(n)
    assert sorted(chosen) == sorted({1, 2, 3} - {finder})  # two different verifiers


def test_another_model_is_preferred(spec_dir: Path) -> None:
    text = "workdir: .\nagents:\n  - {workers: 2}\n  - {model: other, workers: 1}\ntasks:\n  - goal: a\n"
    spec = parse_spec(text, "f.yaml", spec_dir)
    state = _state_with_finding(1, 3)
    (job,) = new_verification_jobs(state, "t1-F1", 2, Stance.VERIFY, 1)
    state.jobs.append(job)
    assert choose_verifier(state, spec, job, alive=[1, 2, 3], free=[2, 3]) == 3
    assert choose_verifier(state, spec, job, alive=[1, 2, 3], free=[2]) is None  # waits for worker 3
    assert choose_verifier(state, spec, job, alive=[1, 2], free=[2]) == 2  # worker 3 is out


def test_three_rounds(spec_dir: Path) -> None:
    spec = parse_spec(GOOD + "verification:\n  rounds: find-refute-confirm\n", "f.yaml", spec_dir)
    state = _state_with_finding(1, 3)
    (refute,) = new_verification_jobs(state, "t1-F1", 2, Stance.REFUTE, 1)
    state.jobs.append(refute)
    assert finding_status(state, spec, "t1-F1") is FindingStatus.PENDING
    refute.status, refute.worker = JobStatus.DONE, 2
    state.verdicts.append(_verdict(refute, Verdict.UNVERIFIABLE))
    assert finding_status(state, spec, "t1-F1") is FindingStatus.PENDING  # survived: round 3 due
    (confirm,) = new_verification_jobs(state, "t1-F1", 3, Stance.CONFIRM, 1)
    state.jobs.append(confirm)
    assert confirm.id == "t1-F1.c1"
    confirm.status, confirm.worker = JobStatus.DONE, 3
    state.verdicts.append(_verdict(confirm, Verdict.CONFIRMED))
    assert finding_status(state, spec, "t1-F1") is FindingStatus.CONFIRMED


def _verdict(job: Job, verdict: Verdict) -> AcceptedVerdict:
    assert job.worker is not None and job.stance is not None and job.finding is not None
    report = VerdictReport(
        job=job.id,
        finding=job.finding,
        verdict=verdict,
        reason="r",
        evidence=[CommandEvidence(command="true", exit_code=0)],
    )
    return AcceptedVerdict(
        job=job.id, finding=job.finding, verifier=job.worker, round=job.round, stance=job.stance, report=report
    )


def test_report_matrix_and_single_file_html(tmp_path: Path, spec_dir: Path) -> None:
    spec: FleetSpec = parse_spec(GOOD, "f.yaml", spec_dir)
    run = _run_folder(tmp_path)
    (run.root / "run.json").write_text(
        json.dumps(
            {
                "name": "run",
                "backend": "local",
                "agent": "claude",
                "workers": 3,
                "workdir": str(spec_dir),
                "permission_mode": "acceptEdits",
                "tmux_socket": "orch-run",
                "orch_version": "0",
            }
        )
    )
    state = _state_with_finding(1, 3)
    (job,) = new_verification_jobs(state, "t1-F1", 2, Stance.VERIFY, 1)
    job.status, job.worker, job.sent_at, job.ended_at = JobStatus.DONE, 3, 1.0, 3.0
    state.jobs.append(job)
    state.verdicts.append(_verdict(job, Verdict.REFUTED))
    report = build_report(run, spec, state)
    text = matrix_text(report)
    assert "finder" in text and "REFUTED" in text
    page = render_html(report)
    assert "<table>" in page and "<style>" in page and "logs/agent-3.log" in page
    assert not re.search(r"""(src|href)=['"]?(https?:)?//""", page), "external asset in report.html"
    assert "Nothing was billed" not in page  # a run on the real model: its costs are real


def test_skill_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "cfg"))
    result = orch("skill", "install")
    assert result.exit_code == 0, result.output
    path = tmp_path / "cfg" / "skills" / "orch" / "SKILL.md"
    head = yaml.safe_load(path.read_text().split("---")[1])
    assert head["name"] == "orch" and "verif" in head["description"]
    assert install(tmp_path / "elsewhere").read_text() == path.read_text()


def test_hook_log_reads_only_new_complete_lines(tmp_path: Path) -> None:
    from orch.run.files import JsonlTail
    from orch.run.records import HookEvent

    path = tmp_path / "agent-1.jsonl"
    log = JsonlTail(path, HookEvent)
    assert log.records() == []
    path.write_text('{"ts": 1, "hook_event_name": "SessionStart"}\n{"ts": 2, "hook_event_na')
    assert [e.hook_event_name for e in log.records()] == ["SessionStart"]
    with path.open("a") as fh:
        fh.write('me": "Stop"}\nnot json\n')
    assert [e.hook_event_name for e in log.records()] == ["SessionStart", "Stop"]


def test_demo_live_without_credentials_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "no-login"))
    result = orch("demo", "--live", "--local")
    assert result.exit_code == 2
    assert (
        "orch demo --live needs credentials for its claude workers" in result.output
        and "without --live" in result.output
    )

"""The offline verifier's shell call (orch.lead.briefs.verification_check) run by a real bash, with the real
`orch offline-verdict` (orch.lead.verdictwriter) writing the verdict from orch's record of the reproduce command;
the controller works out the same verdict itself (so a file that differs is forged), and its check accepts it
against a ledger holding that very call and orch's run; it refuses a verifier that only echoed the command it
cites."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from orch.jobs.findings import CodeEvidence, Finding, ProblemKind, RanCommand, Reproduction, Severity, check_verdict
from orch.lead import briefs, verdictwriter
from orch.run.folder import RunFolder
from orch.spec.model import FleetSpec, TaskSpec
from orch.spec.placeholders import script_block

TRUE = Finding(
    id="F1",
    claim="page 1 skips the first items",
    severity=Severity.HIGH,
    evidence=[CodeEvidence(file="pages.py", line=15, quote="start = page * size")],
    reproduce="python3 -c 'import sys; from pages import paginate; "
    "sys.exit(0 if paginate(list(range(10)), 1, 5) != [0, 1, 2, 3, 4] else 1)'",
)
FALSE = Finding(
    id="F1",
    claim="mean([]) raises ZeroDivisionError",
    severity=Severity.MEDIUM,
    evidence=[CodeEvidence(file="stats.py", line=10, quote="return sum(values) / len(values)")],
    reproduce="python3 -c 'from stats import mean; mean([])' 2>&1 | grep -q ZeroDivisionError",
)
NO_REPRO = TRUE.model_copy(update={"reproduce": None})
NOT_THERE = TRUE.model_copy(update={"evidence": [CodeEvidence(file="pages.py", line=15, quote="start = page + 1")]})
JOB, TOKEN, FINDING = "t1-F1.v1", "t1-F1.v1@c0ffee00", "t1-F1"


@pytest.fixture
def run(tmp_path: Path) -> RunFolder:
    run = RunFolder(tmp_path / "run")
    for sub in (run.root, run.state_dir, run.outbox(2)):
        sub.mkdir(parents=True, exist_ok=True)
    return run


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    shutil.copytree(Path(str(resources.files("orch") / "data" / "demo" / "sample")), root)
    return root


def _values(run: RunFolder, workdir: Path) -> dict[str, str]:
    return {
        "workdir": str(workdir),
        "verdict_file": str(run.outbox_verdict(2, JOB)),
        "result_file": str(run.result(2)),
        "done_file": str(run.done(2)),
        "job": TOKEN,
        "finding_id": FINDING,
    }


def _bash(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The call as an agent's shell tool makes it: bash, orch's bin dir first on PATH (orch.fleet.launch)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("finding", "verdict"),
    [(TRUE, "CONFIRMED"), (FALSE, "REFUTED"), (NO_REPRO, "UNVERIFIABLE"), (NOT_THERE, "REFUTED")],
    ids=["reproduces", "does-not-reproduce", "no-reproduce-command", "quote-not-there"],
)
def test_the_offline_verifier_writes_a_verdict_the_controller_accepts(
    run: RunFolder, workdir: Path, tmp_path: Path, finding: Finding, verdict: str
) -> None:
    record, ran = verdictwriter.NO_RECORD, []
    if finding.reproduce:  # orch's run of it (orch.lead.reproduce runs it in the checks' sandbox: its own test)
        done = _bash(finding.reproduce, workdir)
        reproduced = Reproduction(command=finding.reproduce, exit_code=done.returncode, output=done.stdout)
        run.findings_dir.mkdir()
        run.reproduction(FINDING).write_text(reproduced.model_dump_json())
        record, ran = str(run.reproduction(FINDING)), [reproduced.ran()]
    script = briefs.verification_check(finding, _values(run, workdir), record)
    done = _bash(script, tmp_path)
    assert done.returncode == 0, done.stderr
    written = json.loads(run.outbox_verdict(2, JOB).read_text())
    assert written["verdict"] == verdict and written["job"] == TOKEN, written
    ledger = [RanCommand(script, is_error=False), *filter(None, ran)]  # the call, as the gateway's ledger has it
    report, problems = check_verdict(run, JOB, TOKEN, FINDING, 2, workdir, 3, ledger)
    assert problems == [] and report is not None and report.verdict.value == verdict
    # The controller's own verdict from the same inputs is the very one the call wrote.
    ev = finding.evidence[0]
    found = verdictwriter.found_in(workdir / ev.file, ev.quote)
    expected = verdictwriter.report(
        TOKEN, FINDING, found, verdictwriter.read_record(record), ev.file, ev.line, ev.quote
    )
    assert expected == written


def test_every_line_of_the_offline_verifier_is_short(run: RunFolder, workdir: Path) -> None:
    """Gemini CLI's read_file cuts a line at 2000 characters and refuses `$(...)` in a shell command."""
    long_workdir = workdir.parent / ("w" * 120)
    values = {**_values(run, long_workdir), "verdict_file": "/" + "r" * 100 + "/outbox/agent-2/x.verdict.json"}
    spec = FleetSpec(workdir=workdir, tasks=[TaskSpec(id="t1", goal="g")], offline=True)
    for finding in (TRUE, FALSE, NO_REPRO):
        steps = briefs.offline_verify_steps(spec, finding, values, "/" + "r" * 100 + "/findings/t1-F1.reproduce.json")
        block = script_block(steps)
        assert max(len(line) for line in block.splitlines()) < 1000, block  # 2000 would do
        assert "$(" not in block and "`" not in steps[0]["bash"]


HOSTILE = {
    # A verifier that never ran the reproduce command but cites it, exit 0: each call only mentions it.
    "echoed": 'echo "{repro}"',
    "echoed-unquoted-after-a-list": "cd /w && echo {repro}",
    "in-a-heredoc": "cat <<'EOF'\n{repro}\nEOF",
    "in-a-comment": "true # {repro}",
    "an-argument-to-another-program": "python3 -c 'print(1)' {repro_quoted}",
    "unparseable": "echo 'x; {repro}",
}


@pytest.mark.parametrize("call", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_command_only_mentioned_in_a_call_was_not_run(run: RunFolder, workdir: Path, call: str) -> None:
    repro = "python3 -m pytest -q"
    run.result(2).write_text("checked\n")
    evidence = [{"command": repro, "exit_code": 0}, {"file": "pages.py", "line": 15, "quote": "start = page * size"}]
    verdict = {"job": TOKEN, "finding": FINDING, "verdict": "CONFIRMED", "reason": "r", "evidence": evidence}
    run.outbox_verdict(2, JOB).write_text(json.dumps(verdict))
    ledger = [RanCommand(call.format(repro=repro, repro_quoted=f"'{repro}'"), is_error=False)]
    problems = check_verdict(run, JOB, TOKEN, FINDING, 2, workdir, 3, ledger)[1]
    assert [p.kind for p in problems] == [ProblemKind.UNRUN_COMMAND]
    # The same command run as a part of a call (a list, a subshell, a pipeline) counts.
    for ran in (f"cd /w && {repro}", f"( {repro} ) > o 2>&1; code=$?", f"{repro} | tail -n 3", f"x=$({repro})"):
        assert check_verdict(run, JOB, TOKEN, FINDING, 2, workdir, 3, [RanCommand(ran)])[1] == [], ran


@pytest.mark.parametrize(
    "args",
    [[], ["1", "-", "v.json"], ["1", "-", "v.json", "r.md", "j", "f", "pages.py", "ten", "q"]],
    ids=["none", "too-few", "line-not-a-number"],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, args: list[str]) -> None:
    done = _bash("orch offline-verdict " + " ".join(args), tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "usage: orch offline-verdict" in done.stderr and list(tmp_path.iterdir()) == []


def test_the_command_starts_without_typer(run: RunFolder, tmp_path: Path) -> None:
    """Like `orch bus post`, it takes orch.cli.main's fast path: no typer, tmux or docker is imported."""
    modules = tmp_path / "modules"
    probe = (
        "import sys\ntry:\n    from orch.cli.main import main; main()\n"
        f"finally:\n    open({str(modules)!r}, 'w').write(' '.join(sys.modules))\n"
    )
    args = ["0", "-", str(run.outbox_verdict(2, JOB)), str(run.result(2)), TOKEN, FINDING, "pages.py", "3", "q"]
    done = subprocess.run([sys.executable, "-c", probe, "offline-verdict", *args], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(run.outbox_verdict(2, JOB).read_text())["verdict"] == "REFUTED"
    assert not {"typer", "jinja2", "docker", "pydantic"} & set(modules.read_text().split())

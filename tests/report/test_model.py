"""The report's tokens and cost (orch.report.model, orch.report.render): from the gateway's usage.json when the run
has one, else the status lines; and what it says about billing and the evidence source."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from orch.errors import UsageError
from orch.gateway.modeldir import UsageLine, UsageSnapshot, WorkerUsage
from orch.jobs.findings import Verdict
from orch.jobs.state import ControllerState, JobStatus, Stance, load_state
from orch.jobs.verification import new_verification_jobs
from orch.lead.controller import initial_state, write_spec
from orch.report.model import build_report
from orch.report.render import cost_line, matrix_text, render_html, render_markdown, write_reports
from orch.run.folder import RunFolder
from orch.spec.load import parse_spec
from orch.spec.model import FleetSpec, TaskSpec
from tests.helpers import orch, run_info
from tests.jobs.test_findings import bare_run_folder
from tests.jobs.test_verification import accepted_verdict, state_with_finding
from tests.lead.specs import GOOD
from tests.report.ciformats import SPEC as CI_SPEC
from tests.report.ciformats import run_with, valid_sarif

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

SPEC = FleetSpec(tasks=[TaskSpec(id="t1", goal="g"), TaskSpec(id="t2", goal="h")], workers=2, offline=True)


def _run(name: str) -> tuple[RunFolder, ControllerState]:
    run = RunFolder.for_name(name)
    run.create(run_info(name, workers=2))
    write_spec(run, SPEC)
    state = initial_state(run, SPEC)
    state.jobs[0].worker, state.jobs[1].worker = 1, 2
    return run, state


def _line(inp: int, out: int, read: int, write: int, cost: float) -> UsageLine:
    return UsageLine(
        requests=1,
        input_tokens=inp,
        output_tokens=out,
        cache_read_input_tokens=read,
        cache_creation_input_tokens=write,
        cost_usd=cost,
    )


def _usage(billed: bool) -> UsageSnapshot:
    a, b = _line(10, 20, 30, 40, 0.5), _line(1, 2, 3, 4, 0.25)
    workers = {
        1: WorkerUsage(**a.model_dump(), by_model={"claude-x": a}, by_job={"t1": a}),
        2: WorkerUsage(**b.model_dump(), by_model={"claude-x": b}, by_job={"t2": b}),
    }
    total = _line(11, 22, 33, 44, 0.75).model_copy(update={"requests": 2})
    return UsageSnapshot(
        offline=not billed, billed=billed, pricing="orch/data/pricing.json", updated=1.0, workers=workers, total=total
    )


def test_usage_per_worker_model_and_job_from_the_gateway() -> None:
    run, state = _run("metered")
    run.model_dir.mkdir()
    run.model_usage.write_text(_usage(billed=False).model_dump_json())
    report = build_report(run, SPEC, state)
    assert report.cost_source == "gateway" and report.billed is False
    assert report.evidence_source == "ledger"
    w1 = report.workers[0].usage
    assert w1 is not None and (w1.input_tokens, w1.output_tokens, w1.cache_read_tokens, w1.cache_write_tokens) == (
        10,
        20,
        30,
        40,
    )
    assert report.workers[0].cost_usd == 0.5
    (model,) = report.models
    assert model.model == "claude-x" and model.usage.cost_usd == 0.75 and model.usage.cache_write_tokens == 44
    job = report.jobs[1].usage
    assert job is not None and job.input_tokens == 1
    md = render_markdown(report)
    assert "Nothing was billed: this run was offline" in md
    assert "| model claude-x | 2 | 11 | 22 | 33 | 44 | $0.7500 |" in md
    assert "| job t1 | 1 | 10 | 20 | 30 | 40 | $0.5000 |" in md
    assert "Claude Code's own estimate" not in md
    assert "hook logs" not in md  # the ledger was the evidence source
    assert "Nothing was billed" in render_html(report)
    assert cost_line(report) == "cost: $0.7500 for 110 tokens, nothing billed (offline: orch's scripted model answered)"


def test_a_billed_run_says_so() -> None:
    run, state = _run("billed")
    run.model_dir.mkdir()
    run.model_usage.write_text(_usage(billed=True).model_dump_json())
    md = render_markdown(build_report(run, SPEC, state))
    assert "Tokens and costs as priced by orch's model gateway" in md and "Nothing was billed" not in md


def test_a_replayed_run_says_nothing_was_billed() -> None:
    run, state = _run("replayed")
    run.model_dir.mkdir()
    run.model_usage.write_text(_usage(billed=False).model_dump_json())
    state.replay_of = "/somewhere/recorded"
    assert "Nothing was billed: this run replayed a recording" in render_markdown(build_report(run, SPEC, state))


def test_a_run_without_a_gateway_flags_its_evidence_source() -> None:
    run, state = _run("old")
    report = build_report(run, SPEC, state)
    assert report.cost_source == "status-line" and report.total is None and report.workers[0].usage is None
    assert report.evidence_source == "hooks"
    md = render_markdown(report)
    assert "no model gateway" in md and "which the workers themselves can write" in md
    assert "## Tokens and cost" not in md


def test_the_report_says_what_each_agent_of_the_fleet_cannot_do() -> None:
    run = RunFolder.for_name("mixed")
    info = run_info("mixed", workers=2).model_copy(update={"agent": "claude", "worker_agents": {2: "codex"}})
    run.create(info)
    write_spec(run, SPEC)
    report = build_report(run, SPEC, initial_state(run, SPEC))
    assert list(report.agent_limits) == ["codex"]  # Claude Code: none known
    assert any("session log" in clause for clause in report.agent_limits["codex"])
    assert "## Agent limits\n\n- codex: no hook for a turn" in render_markdown(report)
    assert "<h2>Agent limits</h2><ul><li>codex: " in render_html(report)
    single = RunFolder.for_name("single")
    single.create(run_info("single", workers=2))
    write_spec(single, SPEC)
    assert "Agent limits" not in render_markdown(build_report(single, SPEC, initial_state(single, SPEC)))


def test_the_reports_are_written_all_or_none() -> None:
    # report.sarif cannot be written (a directory in its place): one line, exit 2, and no report changed.
    run = run_with("blocked", [])
    before = {p: p.read_bytes() for p in (run.report_json, run.report_md, run.report_html, run.report_junit)}
    run.report_sarif.unlink()
    run.report_sarif.mkdir()
    state = load_state(run)
    state.findings.clear()
    state.outcome = state.outcome.model_copy(update={"reason": "changed"}) if state.outcome else None
    with pytest.raises(UsageError) as caught:
        write_reports(run, CI_SPEC, state)
    assert caught.value.exit_code == 2
    line = caught.value.one_line()
    assert "\n" not in line and f"{run.report_sarif}: Is a directory" in line and "orch report blocked" in line
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(p.name for p in run.root.iterdir() if p.name.startswith(".report")) == []  # no temp left
    # `orch report` says the same in one line and exits 2.
    result = orch("report", "blocked")
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert result.output.startswith("orch: error: cannot write the reports of run blocked:"), result.output
    run.report_sarif.rmdir()
    result = orch("report", "blocked")
    assert result.exit_code == 0, result.output
    assert "report.sarif" in result.output and "report.junit.xml" in result.output
    assert valid_sarif(run.report_sarif)["runs"][0]["results"] == []


def test_report_matrix_and_single_file_html(tmp_path: Path, spec_dir: Path) -> None:
    spec: FleetSpec = parse_spec(GOOD, "f.yaml", spec_dir)
    run = bare_run_folder(tmp_path)
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
    state = state_with_finding(1, 3)
    (job,) = new_verification_jobs(state, "t1-F1", 2, Stance.VERIFY, 1)
    job.status, job.worker, job.sent_at, job.ended_at = JobStatus.DONE, 3, 1.0, 3.0
    state.jobs.append(job)
    state.verdicts.append(accepted_verdict(job, Verdict.REFUTED))
    report = build_report(run, spec, state)
    text = matrix_text(report)
    assert "finder" in text and "REFUTED" in text
    page = render_html(report)
    assert "<table>" in page and "<style>" in page and "logs/agent-3.log" in page
    assert not re.search(r"""(src|href)=['"]?(https?:)?//""", page), "external asset in report.html"
    assert "Nothing was billed" not in page  # a run on the real model: its costs are real

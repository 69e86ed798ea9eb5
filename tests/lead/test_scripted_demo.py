"""The demo, played by orch's scripted agent (the fast tier's `orch demo`): the run and every command after it
agree it went as designed: `orch run`'s banner and exit code, `orch status`, `orch ls`, `orch read` of a stopped
worker, `orch report`, report.junit.xml and report.sarif. The same checks of the real Claude Code demo are in
tests/lead/test_claude.py."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from orch.cli.outputs import LsOutput, ReadOutput, StatusOutput
from orch.fleet import launch
from orch.lead.report import RunReport
from orch.run.folder import RunFolder
from tests.helpers import demo_spec, orch
from tests.lead.ciformats import junit, valid_sarif

NAME = "demo"


def test_the_demo_and_every_command_after_it_agree_it_went_as_designed(tmp_path: Path) -> None:
    """One run for every check (a fixture shared by several tests is made again on each xdist worker). Its fleet
    is kept (teardown off) so that a live worker's screen is read before the run is stopped."""
    spec = demo_spec(tmp_path, "scripted")
    spec.write_text(yaml.safe_dump({**yaml.safe_load(spec.read_text()), "teardown": False}))
    ran = orch("run", spec, "--local", "--name", NAME)
    assert ran.exit_code == 0, ran.output
    run = RunFolder.for_name(NAME)
    live = orch("read", NAME, "2", "--lines", "100000")
    assert live.exit_code == 0, live.output
    assert orch("kill", NAME).exit_code == 0
    _the_run_reads_as_success(run, ran.output)
    _status_and_ls_show_the_outcome_end_cost_and_each_workers_jobs(run)
    _read_renders_a_stopped_workers_terminal_as_it_was(run, live.output)
    _report_junit_and_sarif_agree(run)


def _the_run_reads_as_success(run: RunFolder, output: str) -> None:
    assert "run demo: passed (exit 0): all tasks done; 2 finding(s): 1 CONFIRMED, 1 REFUTED" in output
    assert "nothing billed (offline: orch's scripted model answered)" in output
    report = RunReport.model_validate_json(run.report_json.read_text())
    assert (report.exit_code, report.status) == (0, "passed")
    assert {f.id: (f.status.value, f.fails) for f in report.findings} == {
        "pages-F1": ("CONFIRMED", False),
        "stats-F1": ("REFUTED", False),
    }
    # Only the folders the run used: no writers, so no worktrees/ or changes/.
    assert not run.worktrees_root.exists() and not run.changes_dir.exists()
    assert run.findings_dir.is_dir() and run.verdicts_dir.is_dir()


def _status_and_ls_show_the_outcome_end_cost_and_each_workers_jobs(run: RunFolder) -> None:
    shown = orch("status", NAME)
    assert shown.exit_code == 0, shown.output
    assert "tmux server not running" not in shown.output
    head = shown.output.splitlines()[1]
    assert head.startswith("  passed (exit 0): all tasks done; 2 finding(s): 1 CONFIRMED, 1 REFUTED; ended ")
    assert "; cost $" in head and head.endswith(", nothing billed (offline: orch's scripted model answered)")
    assert "pages done: 1 finding(s)" in shown.output and "stats done: 1 finding(s)" in shown.output
    assert "COST (NOT BILLED)" in shown.output
    (view,) = StatusOutput.model_validate_json(orch("status", NAME, "--json").output).runs
    assert view.outcome is not None and (view.outcome.status, view.outcome.exit_code) == ("passed", 0)
    assert view.finished is not None and view.started is not None and view.billed is False
    jobs = {j.job: (j.status, j.result) for w in view.workers for j in w.jobs}
    assert jobs["pages"] == ("done", "1 finding(s)") and jobs["stats"] == ("done", "1 finding(s)")
    verdicts = sorted(r or "" for job, (_, r) in jobs.items() if job.startswith(("pages-F1.", "stats-F1.")))
    assert verdicts == ["CONFIRMED", "CONFIRMED", "REFUTED", "REFUTED"]
    assert all(j.result_file and (run.root / j.result_file).is_file() for w in view.workers for j in w.jobs)
    listed = orch("ls")
    assert listed.exit_code == 0
    (row,) = [line for line in listed.output.splitlines() if line.startswith(f"{NAME} ")]
    assert "passed (exit 0)" in row and "(nothing billed)" in row and " stopped " in row
    (entry,) = LsOutput.model_validate_json(orch("ls", "--json").output).runs
    assert entry.outcome == view.outcome and entry.finished is not None and entry.unbilled == view.unbilled


def _read_renders_a_stopped_workers_terminal_as_it_was(run: RunFolder, live: str) -> None:
    """The stopped worker's log through a terminal emulator gives what tmux showed of the live pane."""
    assert not launch.server_for(run.info()).alive()
    stopped = orch("read", NAME, "2")
    assert stopped.exit_code == 0, stopped.output
    assert "\x1b" not in stopped.output and "Finished: one finding." in stopped.output
    assert stopped.output.rstrip("\n").splitlines() == live.rstrip("\n").splitlines()
    shown = ReadOutput.model_validate_json(orch("read", NAME, "2", "--lines", "5", "--json").output)
    assert shown.source == "transcript" and shown.lines == stopped.output.rstrip("\n").splitlines()[-5:]


def _report_junit_and_sarif_agree(run: RunFolder) -> None:
    again = orch("report", NAME)
    assert again.exit_code == 0, again.output
    assert "run demo: passed (exit 0)" in again.output and "nothing billed" in again.output
    assert json.loads(orch("report", NAME, "--json").output)["status"] == "passed"
    xml = junit(run.report_junit)
    assert (xml.tests, xml.failures, xml.errors, xml.skipped) == (4, 0, 0, 0)  # 2 task jobs, 2 findings
    sarif = valid_sarif(run.report_sarif)
    (invocation,) = sarif["runs"][0]["invocations"]
    assert (invocation["exitCode"], invocation["executionSuccessful"]) == (0, True)
    results = {r["properties"]["finding"]: r for r in sarif["runs"][0]["results"]}
    assert "suppressions" not in results["pages-F1"] and results["pages-F1"]["level"] == "error"
    (suppressed,) = results["stats-F1"]["suppressions"]
    assert suppressed["justification"].startswith("REFUTED by its verifiers: W")
    # The report links each worker's readable transcript, which holds no escape sequence.
    page = run.report_html.read_text()
    for n in (1, 2, 3):
        assert f"logs/agent-{n}.txt" in page and "\x1b" not in run.transcript(n).read_text()
    assert "nothing billed" in page and "cost (nothing billed)" in run.report_md.read_text()
    assert orch("report", "no-such-run").exit_code == 2

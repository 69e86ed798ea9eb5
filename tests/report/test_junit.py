"""report.junit.xml (orch.report.junit), read with junitparser as CI reads it: a testcase per task job and per
finding's verification, failing exactly what the run's exit code fails, saying why and pointing into report.html."""

from __future__ import annotations

import json
from pathlib import Path

from junitparser import Failure, Skipped, TestCase, TestSuite

from orch.exitcodes import Exit
from orch.jobs.findings import Verdict
from orch.jobs.state import JobStatus, load_state, save_state
from orch.report.junit import render_junit
from orch.report.render import write_reports
from orch.spec.model import FailOn
from tests.report.ciformats import SPEC, Claim, junit, report_with_changes, run_with

C, R, U = Verdict.CONFIRMED, Verdict.REFUTED, Verdict.UNVERIFIABLE
CLAIMS = [
    Claim("pages", "F1", "paginate(items, 1, size) skips the first page"),
    Claim("stats", "F1", "mean([]) raises ZeroDivisionError", verdicts=(R, R), file="stats.py", line=10),
    Claim("stats", "F2", "median is off by one", verdicts=(C, U), file="stats.py", line=20),
]


def _suites(xml: object) -> dict[str, TestSuite]:
    return {s.name.split(": ", 1)[1]: s for s in xml}  # type: ignore[attr-defined]


def _cases(suite: TestSuite) -> dict[str, TestCase]:
    return {c.name.split(" ", 1)[0].rstrip(":"): c for c in suite}


def test_one_testcase_per_task_job_and_per_finding() -> None:
    run = run_with("mixed", CLAIMS)
    xml = junit(run.report_junit)
    assert xml.name == "orch run mixed"
    assert (xml.tests, xml.failures, xml.errors, xml.skipped) == (5, 1, 0, 0)  # the one UNVERIFIED finding
    suites = _suites(xml)
    assert list(suites) == ["tasks", "verification"]
    tasks, verification = suites["tasks"], suites["verification"]
    assert (tasks.tests, tasks.failures) == (2, 0) and (verification.tests, verification.failures) == (3, 1)
    properties = tasks.properties()  # type: ignore[no-untyped-call]  # junitparser leaves it unannotated
    assert {p.name: p.value for p in properties} == {
        "run": "mixed",
        "status": "incomplete",
        "report": "report.html",
    }
    pages = _cases(tasks)["pages"]
    assert pages.name == "pages (finder)" and pages.classname == "orch.tasks" and pages.time == 10.0
    assert pages.is_passed
    cases = _cases(verification)
    assert cases["pages-F1"].is_passed and cases["pages-F1"].time == 5.0  # both verifiers' jobs
    assert cases["pages-F1"].name == "pages-F1: paginate(items, 1, size) skips the first page"
    # A refuted finding passes (a false positive caught), its verdicts and where it is in the report beside it.
    refuted = cases["stats-F1"]
    assert refuted.is_passed and refuted.result == []
    said = refuted.system_out or ""
    assert said.startswith("stats-F1 REFUTED: the verifiers refuted the claim: a false positive caught")
    assert "claim (high, found by W1 in task stats): mean([]) raises ZeroDivisionError" in said
    assert "stats-F1.v2: W2 (verify) REFUTED: ran it: REFUTED" in said and said.endswith("report: report.html#stats-F1")
    assert "the verifiers confirmed the claim (high; fail_on never)" in (cases["pages-F1"].system_out or "")
    # One without a verdict fails, saying who said what and why, and where it is in the report.
    (split,) = cases["stats-F2"].result
    assert isinstance(split, Failure) and split.type == "UNVERIFIED" and "W3 UNVERIFIABLE" in split.message
    assert split.message.endswith("see report.html#stats-F2")
    assert "stats.py:20: start = page * size" in split.text and split.text.endswith("report: report.html#stats-F2")
    # The anchors the failures point to are in report.html.
    page = run.report_html.read_text()
    assert "id='stats-F1'" in page and "id='job-pages'" in page


def test_a_failed_task_job_fails_with_its_reason() -> None:
    run = run_with("failing", [])
    state = load_state(run)
    job = state.job("stats")
    job.status, job.failure = JobStatus.FAILED, "no result after 3 corrections: false-evidence"
    from orch.lead import outcome

    state.outcome = outcome.decide(state, SPEC)
    save_state(run, state)
    write_reports(run, SPEC, state)
    xml = junit(run.report_junit)
    (failure,) = _cases(_suites(xml)["tasks"])["stats"].result
    assert failure.type == "failed"
    assert failure.message == (
        "task stats failed: no result after 3 corrections: false-evidence; see report.html#job-stats"
    )
    assert "report: report.html#job-stats" in failure.text


def test_a_confirmed_finding_fails_at_or_above_fail_on_as_the_exit_code_does() -> None:
    spec = SPEC.model_copy(update={"fail_on": FailOn.HIGH})
    run = run_with("failon", [*CLAIMS[:2], Claim("stats", "F2", "median is off", severity="medium")], spec=spec)
    assert json.loads(run.report_json.read_text())["exit_code"] == Exit.FINDINGS
    cases = _cases(_suites(junit(run.report_junit))["verification"])
    (failure,) = cases["pages-F1"].result
    assert isinstance(failure, Failure) and failure.type == "CONFIRMED"
    assert failure.message.startswith("pages-F1 CONFIRMED: the verifiers confirmed the claim (high; fail_on high)")
    assert cases["stats-F2"].is_passed and cases["stats-F1"].is_passed  # below fail_on; refuted


def test_a_run_still_going_skips_what_has_not_ended() -> None:
    run = run_with("going", [Claim("pages", "F1", "paginate skips", verdicts=(C, None))], finished=False)
    state = load_state(run)
    state.job("stats").status = JobStatus.RUNNING
    write_reports(run, SPEC, state)
    xml = junit(run.report_junit)
    assert (xml.tests, xml.failures, xml.skipped) == (3, 0, 2)
    suites = _suites(xml)
    (skipped,) = _cases(suites["tasks"])["stats"].result
    assert isinstance(skipped, Skipped) and "has not ended: running" in skipped.message
    (pending,) = _cases(suites["verification"])["pages-F1"].result
    assert isinstance(pending, Skipped) and pending.message == "pages-F1 is being verified; see report.html#pages-F1"


def test_an_empty_run_has_no_verification_testcases() -> None:
    xml = junit(run_with("empty", []).report_junit)
    suites = _suites(xml)
    assert suites["verification"].tests == 0 and list(suites["verification"]) == []
    assert (xml.tests, xml.failures) == (2, 0)


def test_worker_text_cannot_break_the_file() -> None:
    # Characters XML 1.0 cannot hold, even escaped, in a lying worker's claim and in a verifier's reason.
    claim = Claim("pages", "F1", "a\x1b[31m\x00b </testcase> & \uffff", verdicts=(R, R), quote="\x0c")
    xml = junit(run_with("nasty", [claim]).report_junit)
    case = _cases(_suites(xml)["verification"])["pages-F1"]
    assert case.name == "pages-F1: a\\x1b[31m\\x00b </testcase> & \\xffff"
    assert case.is_passed and "a\\x1b[31m\\x00b </testcase> & \\xffff" in (case.system_out or "")


def test_one_testcase_per_change_gate_failing_when_the_change_keeps_the_run_from_passing(tmp_path: Path) -> None:
    path = tmp_path / "report.junit.xml"
    path.write_text(render_junit(report_with_changes(run_with("changes", []))))
    changes = _suites(junit(path))["changes"]
    cases = _cases(changes)
    assert (changes.tests, changes.failures) == (4, 1)
    assert cases["fix-a"].is_passed and cases["notes"].is_passed  # landed; a writer that changed nothing
    # REJECTED by the gate, for a task that needed no change: the gate's verdict, a result.
    assert cases["fix-b"].is_passed
    said = cases["fix-b"].system_out or ""
    assert "REJECTED (scope)" in said and "check `python3 -m pytest -q`: exit 1" in said
    (conflict,) = cases["fix-c"].result
    assert isinstance(conflict, Failure) and conflict.type == "CONFLICT"
    assert "report.html#change-fix-c" in conflict.message


def test_a_rejected_change_its_task_needed_fails(tmp_path: Path) -> None:
    path = tmp_path / "report.junit.xml"
    report = report_with_changes(run_with("needed", []))
    rows = [r.model_copy(update={"fails": True}) if r.task == "fix-b" else r for r in report.changes]
    path.write_text(render_junit(report.model_copy(update={"changes": rows})))
    (failure,) = _cases(_suites(junit(path))["changes"])["fix-b"].result
    assert isinstance(failure, Failure) and failure.type == "REJECTED" and "scope" in failure.message

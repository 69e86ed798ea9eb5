"""`orch run --json`'s summary line (orch.report.summary): counts per status, the report files there are."""

from __future__ import annotations

import datetime as dt
import json

from orch.jobs.state import FindingStatus
from orch.report.model import FindingRow, JobRow, RunReport
from orch.report.summary import summary
from orch.run.folder import RunFolder
from tests.helpers import run_info


def _finding(fid: str, status: FindingStatus) -> FindingRow:
    return FindingRow(id=fid, task="t", finder=1, claim="c", severity="high", evidence=[], reproduce=None,
                      status=status, verdicts=[])  # fmt: skip


def _job(jid: str, status: str) -> JobRow:
    return JobRow(id=jid, role="finder", worker=1, status=status, seconds=1.0, corrections=0, nudges=0, failure=None)


def test_the_summary_counts_each_status_and_lists_the_reports_written() -> None:
    run = RunFolder.for_name("r")
    run.create(run_info("r"))
    run.report_md.write_text("# r\n")
    run.report_json.write_text("{}")
    report = RunReport(
        run="r", workdir="/w", rounds="single", started=dt.datetime.now(dt.UTC), finished=None, seconds=3.0,
        exit_code=0, status="passed", reason="2 refuted", workers=[], flags=[], billed=False, offline=True,
        findings=[_finding("a", FindingStatus.CONFIRMED), _finding("b", FindingStatus.REFUTED),
                  _finding("c", FindingStatus.REFUTED)],
        jobs=[_job("t", "done"), _job("t.v1", "done"), _job("t.v2", "failed")],
    )  # fmt: skip
    printed = summary(run, 0, report).model_dump_json()
    assert "\n" not in printed  # one JSON line
    line = json.loads(printed)
    assert (line["schema_version"], line["exit_code"], line["status"], line["billed"]) == (2, 0, "passed", False)
    assert (line["fail_on"], line["unbilled"]) == ("never", "offline: orch's scripted model answered")
    assert line["findings"] == {"CONFIRMED": 1, "REFUTED": 2, "UNVERIFIED": 0}
    assert line["jobs"] == {"done": 2, "failed": 1}
    assert line["reports"] == {"md": str(run.report_md.resolve()), "json": str(run.report_json.resolve())}


def test_a_run_without_a_report_still_gives_a_line() -> None:
    run = RunFolder.for_name("r")
    run.create(run_info("r"))
    line = summary(run, 5, None, stopped="the controller's container died").model_dump()
    assert (line["status"], line["reason"], line["reports"]) == ("stopped", "the controller's container died", {})
    assert line["findings"] == {"CONFIRMED": 0, "REFUTED": 0, "UNVERIFIED": 0} and line["jobs"] == {}

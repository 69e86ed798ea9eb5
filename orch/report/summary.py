"""`orch run --json`: the run's result as one JSON line for CI (docs/ci.md: the summary line).

Keys: `run`, `exit_code`, `status` (passed, not-confirmed, failed, stopped), `reason`, `findings` (a
count per status: CONFIRMED, REFUTED, UNVERIFIED, pending), `jobs` (a count per status), `cost_usd`,
`billed`, `replay_of`, and `reports` (absolute paths of the files written: html, md, json, and sarif and
junit where the run folder has them).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from orch.jobs.state import FindingStatus
from orch.report.model import RunReport
from orch.run.folder import RunFolder

SUMMARY_VERSION = 1
REPORT_FILES = ("report_html", "report_md", "report_json", "report_sarif", "report_junit")
"""RunFolder properties of the report files, in the order the summary lists them."""


def report_paths(run: RunFolder) -> dict[str, str]:
    """The report files the run folder holds, keyed html, md, json, sarif, junit."""
    out = {}
    for name in REPORT_FILES:
        path = getattr(run, name, None)  # sarif and junit: RunFolder gains them with report.sarif/.junit.xml
        if path is not None and path.is_file():
            out[name.removeprefix("report_")] = str(path.resolve())
    return out


def summary(run: RunFolder, exit_code: int, report: RunReport | None, stopped: str | None = None) -> dict[str, Any]:
    findings = Counter({s.value: 0 for s in (FindingStatus.CONFIRMED, FindingStatus.REFUTED, FindingStatus.UNVERIFIED)})
    jobs: Counter[str] = Counter()
    if report is not None:
        findings.update(str(f.status.value) for f in report.findings)
        jobs.update(j.status for j in report.jobs)
    status = "stopped" if stopped else report.status if report is not None else "failed"
    reason = stopped or (report.reason if report is not None else "no report was written")
    return {
        "summary": SUMMARY_VERSION,
        "run": run.name,
        "exit_code": exit_code,
        "status": status,
        "reason": reason,
        "findings": dict(findings),
        "jobs": dict(jobs),
        "cost_usd": round(report.total.cost_usd, 6) if report is not None and report.total is not None else None,
        "billed": report.billed if report is not None else None,
        "replay_of": report.replay_of if report is not None else None,
        "reports": report_paths(run),
    }

"""report.junit.xml: a run as JUnit XML tests, which every CI shows.

Built from the report's model (orch.report.model) alone. One test suite per section:
- tasks: one testcase per task job; it passes when the job is done, as the exit code has it (a task job
  not done fails the run, exit 5);
- verification: one testcase per finding; it fails exactly when the finding keeps the run from passing
  (`FindingRow.fails`: UNVERIFIED or pending at the end, exit 4; CONFIRMED at or above `fail_on`, exit 6). A
  REFUTED finding passes: catching a false positive is what verification is for; its verdicts are the
  testcase's system-out, as a CONFIRMED one's are;
- changes: one testcase per writer task's change, failing exactly when it keeps the run from passing.
So the file's failures are the reasons of the run's exit code. While a run is still going, what has not ended
yet is skipped rather than failed. Each failure says why in its message and points to the place in report.html
(a path relative to this file, which sits beside it).

Extension point: `SUITES`, as in orch.report.sarif.render: tasks, verification, and each writer task's change gate.
Worker-written text (claims, reasons, failures) can hold characters XML 1.0 cannot carry: they are
written as \\xNN escapes, so a worker cannot make the file unreadable.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from orch.jobs.changes import ChangeRow, ChangeStatus
from orch.jobs.state import FindingStatus, JobStatus
from orch.report.model import FindingRow, JobRow, RunReport
from orch.run.folder import RELATIVE
from orch.spec.model import Role
from orch.text import shorten

REPORT = RELATIVE.report_html.as_posix()
NAME_CHARS = 100  # a claim in a testcase's name
MESSAGE_CHARS = 500  # a failure's one-line message; the element's text has the whole story
# What XML 1.0 cannot hold, even escaped (control characters, surrogates, U+FFFE/U+FFFF).
NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


@dataclass(frozen=True)
class Outcome:
    """A test case's outcome: `element` is its JUnit XML element."""

    element: Literal["failure", "skipped"]
    message: str
    type: str
    text: str = ""


@dataclass(frozen=True)
class Case:
    name: str
    classname: str
    seconds: float | None = None
    outcome: Outcome | None = None
    """None: passed."""
    out: str = ""
    """What a passed case found (its system-out): a finding's verdicts, a change's gate."""


@dataclass(frozen=True)
class Suite:
    name: str
    cases: Sequence[Case] = field(default_factory=list)


def job_anchor(job: str) -> str:
    return f"{REPORT}#job-{job}"


def finding_anchor(finding: str) -> str:
    return f"{REPORT}#{finding}"


def _finished(report: RunReport) -> bool:
    return report.exit_code is not None


def _task_case(report: RunReport, job: JobRow) -> Case:
    who = f"W{job.worker}" if job.worker is not None else "no worker"
    name = f"{job.id} ({job.role})"  # not the worker: a test keeps its name from run to run
    if job.status == JobStatus.DONE.value:
        return Case(name=name, classname="orch.tasks", seconds=job.seconds)
    why = job.failure or job.status
    where = f"see {job_anchor(job.id)}"
    if not _finished(report) and job.status not in (JobStatus.FAILED.value, JobStatus.CANCELLED.value):
        outcome = Outcome("skipped", f"task {job.id} has not ended: {job.status}; {where}", job.status)
    else:
        text = f"task {job.id} ({job.role}) on {who}: {job.status}\n{why}\n\nreport: {job_anchor(job.id)}"
        outcome = Outcome("failure", f"task {job.id} {job.status}: {why}; {where}", job.status, text)
    return Case(name=name, classname="orch.tasks", seconds=job.seconds, outcome=outcome)


def tasks_suite(report: RunReport) -> Suite:
    judging = (Role.VERIFIER.value, Role.REVIEWER.value)  # their jobs' ends show as verdicts, not as tasks
    return Suite("tasks", [_task_case(report, j) for j in report.jobs if j.role not in judging])


def _verification_case(report: RunReport, row: FindingRow, seconds: dict[str, float | None]) -> Case:
    spent = [s for c in row.verdicts if (s := seconds.get(c.job)) is not None]
    name = f"{row.id}: {shorten(' '.join(row.claim.split()), NAME_CHARS)}"
    case = Case(name=name, classname="orch.verification", seconds=round(sum(spent), 1) if spent else None)
    status = FindingStatus(row.status)
    said = "; ".join(
        f"W{c.verifier} {c.verdict}" + (f": {' '.join(c.reason.split())}" if c.reason else "")
        for c in row.verdicts
        if c.verifier is not None
    )
    where = f"see {finding_anchor(row.id)}"
    why = {
        FindingStatus.CONFIRMED: f"the verifiers confirmed the claim ({row.severity}; fail_on {report.fail_on.value})",
        FindingStatus.REFUTED: "the verifiers refuted the claim: a false positive caught",
        FindingStatus.UNVERIFIED: "the verifiers did not agree, or could not check it",
        FindingStatus.PENDING: "the run ended before its verification did",
    }[status]
    lines = [
        f"{row.id} {status.value}: {why}",
        f"claim ({row.severity}, found by W{row.finder} in task {row.task}): {row.claim}",
        *(f"evidence: {e}" for e in row.evidence),
        *(f"{c.job}: W{c.verifier} ({c.stance}) {c.verdict}: {c.reason}" for c in row.verdicts),
        "",
        f"report: {finding_anchor(row.id)}",
    ]
    if not row.fails:
        if status is FindingStatus.PENDING or (status is FindingStatus.UNVERIFIED and not _finished(report)):
            return replace(case, outcome=Outcome("skipped", f"{row.id} is being verified; {where}", "pending"))
        return replace(case, out="\n".join(lines))
    message = shorten(f"{row.id} {status.value}: {why}" + (f" ({said})" if said else "") + f"; {where}", MESSAGE_CHARS)
    return replace(case, outcome=Outcome("failure", message, status.value, "\n".join(lines)))


def verification_suite(report: RunReport) -> Suite:
    seconds = {j.id: j.seconds for j in report.jobs}
    return Suite("verification", [_verification_case(report, row, seconds) for row in report.findings])


def change_anchor(task: str) -> str:
    return f"{REPORT}#change-{task}"


def _change_case(report: RunReport, row: ChangeRow) -> Case:
    case = Case(name=f"{row.task} (change)", classname="orch.changes")
    where = f"see {change_anchor(row.task)}"
    why = f" ({row.reason.value})" if row.reason else ""
    lines = [
        f"change of {row.task} by W{row.writer} ({row.agent}): {row.status.value}{why}",
        row.detail,
        f"diffstat: {row.diffstat}" if row.diffstat else "",
        *(f"check `{c.command}`: exit {c.exit_code}" + (" (timed out)" if c.timed_out else "") for c in row.checks),
        *(f"{c.job}: W{c.reviewer} ({c.agent}) {c.verdict}: {c.reason}" for c in row.reviews),
        "",
        f"report: {change_anchor(row.task)}",
    ]
    text = "\n".join(line for line in lines if line)
    if not row.fails:
        if not _finished(report) and row.status not in RESULTS:
            return replace(case, outcome=Outcome("skipped", f"change {row.task} is in the gate; {where}", "pending"))
        return replace(case, out=text)  # LANDED, UNCHANGED, or REJECTED where the task did not need a change
    message = shorten(
        f"change {row.task} {row.status.value}{why}: {' '.join(row.detail.split())}; {where}", MESSAGE_CHARS
    )
    return replace(case, outcome=Outcome("failure", message, row.status.value, text))


RESULTS = (ChangeStatus.LANDED, ChangeStatus.UNCHANGED, ChangeStatus.REJECTED)
"""How a change may end without failing the run (unless its task needed one: `ChangeRow.fails`)."""


def changes_suite(report: RunReport) -> Suite | None:
    """One testcase per writer task's change gate: failed when the change keeps the run from passing; none in a
    run without writer tasks."""
    return Suite("changes", [_change_case(report, row) for row in report.changes]) if report.changes else None


SUITES: tuple[Callable[[RunReport], Suite | None], ...] = (tasks_suite, verification_suite, changes_suite)
"""What goes into report.junit.xml, in order: the task jobs, each finding's verification, each change's gate."""


def _xml(text: str) -> str:
    return NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _counts(cases: Sequence[Case]) -> dict[str, str]:
    failures = sum(1 for c in cases if c.outcome is not None and c.outcome.element == "failure")
    skipped = sum(1 for c in cases if c.outcome is not None and c.outcome.element == "skipped")
    seconds = sum(c.seconds or 0.0 for c in cases)
    return {
        "tests": str(len(cases)),
        "failures": str(failures),
        "errors": "0",
        "skipped": str(skipped),
        "time": f"{seconds:.1f}",
    }


def build_junit(report: RunReport) -> ET.Element:
    suites = [suite for make in SUITES if (suite := make(report)) is not None]
    every = [c for s in suites for c in s.cases]
    root = ET.Element("testsuites", {"name": _xml(f"orch run {report.run}"), **_counts(every)})
    stamp = report.started.strftime("%Y-%m-%dT%H:%M:%S")
    for suite in suites:
        attrs = {"name": _xml(f"{report.run}: {suite.name}"), **_counts(suite.cases), "timestamp": stamp}
        node = ET.SubElement(root, "testsuite", attrs)
        props = ET.SubElement(node, "properties")
        for key, value in (("run", report.run), ("status", report.status), ("report", REPORT)):
            ET.SubElement(props, "property", {"name": key, "value": _xml(value)})
        for case in suite.cases:
            attrs = {"name": _xml(case.name), "classname": case.classname}
            if case.seconds is not None:
                attrs["time"] = f"{case.seconds:.1f}"
            element = ET.SubElement(node, "testcase", attrs)
            if case.out:
                ET.SubElement(element, "system-out").text = _xml(case.out)
            if case.outcome is not None:
                out = ET.SubElement(
                    element, case.outcome.element, {"message": _xml(case.outcome.message), "type": case.outcome.type}
                )
                if case.outcome.text:
                    out.text = _xml(case.outcome.text)
    return root


def render_junit(report: RunReport) -> str:
    root = build_junit(report)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"

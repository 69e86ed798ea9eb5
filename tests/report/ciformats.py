"""Checks of report.sarif and report.junit.xml that several tests share: the official SARIF 2.1.0 schema
(tests/report/data/README.md says where the copy comes from) and junitparser."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft4Validator
from junitparser import JUnitXml

from orch.jobs.changes import ChangeRow, ChangeStatus, CheckResult, RejectReason, ReviewCell
from orch.jobs.findings import CodeEvidence, Finding, Severity, Verdict, VerdictReport
from orch.jobs.state import (
    AcceptedFinding,
    AcceptedVerdict,
    ControllerState,
    Job,
    JobStatus,
    Stance,
    load_state,
    save_state,
)
from orch.lead import outcome
from orch.lead.controller import initial_state, write_spec
from orch.report.model import RunReport, build_report
from orch.report.render import write_reports
from orch.run.folder import RunFolder
from orch.spec.model import FleetSpec, Role, TaskSpec, VerificationSpec
from tests.helpers import run_info

SCHEMA = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"


@cache
def _validator() -> Draft4Validator:
    schema = json.loads(SCHEMA.read_text())
    Draft4Validator.check_schema(schema)
    return Draft4Validator(schema, format_checker=Draft4Validator.FORMAT_CHECKER)


def valid_sarif(path: Path) -> dict[str, Any]:
    """The log, after checking it against the schema (every error listed when it fails)."""
    data: dict[str, Any] = json.loads(path.read_text())
    errors = sorted(_validator().iter_errors(data), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)
    return data


def junit(path: Path) -> JUnitXml:
    """The file as junitparser reads it (always a <testsuites> root)."""
    xml = JUnitXml.fromfile(str(path))
    assert isinstance(xml, JUnitXml), type(xml)
    return xml


# --- a run's books with findings and verdicts, made without starting anything ------------------
SPEC = FleetSpec(
    tasks=[
        TaskSpec(id="pages", title="Pagination", goal="determine whether paginate() returns every page"),
        TaskSpec(id="stats", goal="determine whether mean() handles every input"),
    ],
    workers=3,
    offline=True,
    verification=VerificationSpec(verifiers_per_finding=2),
)


@dataclass(frozen=True)
class Claim:
    task: str
    fid: str
    claim: str
    severity: str = "high"
    verdicts: tuple[Verdict | None, ...] = (Verdict.CONFIRMED, Verdict.CONFIRMED)
    """One per verifier (W2, W3); None: that verifier's job has not ended."""
    file: str = "pages.py"
    line: int = 15
    quote: str = "start = page * size"


def run_with(
    name: str, claims: list[Claim], workdir: str = "/workspace", finished: bool = True, spec: FleetSpec = SPEC
) -> RunFolder:
    """A run folder whose reports were written from these findings (every task job done)."""
    run = RunFolder.for_name(name)
    run.create(run_info(name, workers=3, workdir=workdir))
    write_spec(run, spec)
    save_state(run, state_with(run, claims, finished, spec))
    write_reports(run, spec, load_state(run))
    return run


def state_with(run: RunFolder, claims: list[Claim], finished: bool = True, spec: FleetSpec = SPEC) -> ControllerState:
    state = initial_state(run, spec)
    state.started = 1_700_000_000.0
    for job in state.jobs:
        job.worker, job.status, job.sent_at, job.ended_at = 1, JobStatus.DONE, state.started, state.started + 10
    for c in claims:
        fid = f"{c.task}-{c.fid}"
        evidence = [CodeEvidence(file=c.file, line=c.line, quote=c.quote)]
        found = Finding(id=c.fid, claim=c.claim, severity=Severity(c.severity), evidence=evidence)
        state.findings.append(AcceptedFinding(id=fid, job=c.task, task=c.task, finder=1, finding=found))
        for n, verdict in enumerate(c.verdicts, 2):
            job = Job(id=f"{fid}.v{n}", role=Role.VERIFIER, finding=fid, round=2, stance=Stance.VERIFY, worker=n)
            job.sent_at = state.started + 10
            if verdict is None:
                job.status = JobStatus.RUNNING
            else:
                job.status, job.ended_at = JobStatus.DONE, state.started + 12.5
                report = VerdictReport(
                    job=state.token(job.id), finding=c.fid, verdict=verdict, reason=f"ran it: {verdict}"
                )
                state.verdicts.append(
                    AcceptedVerdict(job=job.id, finding=fid, verifier=n, round=2, stance=Stance.VERIFY, report=report)
                )
            state.jobs.append(job)
    if finished:
        state.outcome = outcome.decide(state, spec)
        state.finished = state.started + 30
    return state


# --- a report with writer tasks' changes -------------------------------------------------------
def report_with_changes(run: RunFolder) -> RunReport:
    """The run's report with one change of each ending a writer task can have (added to its report data), each
    marked `fails` as the report marks it for tasks that needed no change: only the CONFLICT."""
    check = CheckResult(command="python3 -m pytest -q", exit_code=1, seconds=0.4, output_tail="1 failed")
    review = ReviewCell(job="fix-a.rv1", reviewer=3, agent="codex", verdict="REFUTED", reason="misses page 0")
    rows = [
        ChangeRow(task="fix-a", writer=1, agent="claude", job="fix-a", status=ChangeStatus.LANDED, commit="ab" * 20),
        ChangeRow(task="fix-b", writer=2, agent="claude", job="fix-b", status=ChangeStatus.REJECTED,
                  reason=RejectReason.SCOPE, detail="edits protected paths: tests/test_pages.py",
                  files=["tests/test_pages.py", "pages.py"], checks=[check], reviews=[review]),
        ChangeRow(task="fix-c", writer=1, agent="claude", job="fix-c.rb2", status=ChangeStatus.CONFLICT,
                  detail="pages.py: the patch no longer applies", files=["pages.py"], rebases=2, fails=True),
        ChangeRow(task="notes", writer=3, agent="codex", job="notes", status=ChangeStatus.UNCHANGED),
    ]  # fmt: skip
    return build_report(run, SPEC, load_state(run)).model_copy(update={"changes": rows})

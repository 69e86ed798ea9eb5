"""How a job ends (orch/lead/acceptance.py), in process on a run folder with no tmux server: a finder's checked
findings are the controller's own copy and open verification jobs, output that does not check is rejected
(the job failed past the correction limit), a failed verifier is replaced by another worker, and an abort
cancels every open job. End to end with the scripted agent: tests/scenarios/test_scripted.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orch.jobs.findings import CodeEvidence, Finding, FindingsReport, ProblemKind, Severity
from orch.jobs.state import JobStatus
from orch.run.events import Event
from tests.lead.desks import Parts, parts


@pytest.fixture
def desk(tmp_path: Path) -> Parts:
    return parts(tmp_path)


def _report(p: Parts, quote: str = "x = 1") -> FindingsReport:
    job = p.state.jobs[0]
    finding = Finding(
        id="F1", claim="x is one", severity=Severity.LOW, evidence=[CodeEvidence(file="a.py", line=1, quote=quote)]
    )
    return FindingsReport(job=p.state.token(job.id), findings=[finding])


def _hand_in(p: Parts, n: int, report: FindingsReport) -> None:
    """Worker n's output for the first job, as its agent would write it."""
    job = p.state.jobs[0]
    p.run.result(n).write_text("# Result\nfound one\n")
    p.run.outbox_findings(n, job.id).write_text(report.model_dump_json())
    p.run.done(n).touch()


def test_checked_findings_are_kept_as_the_controllers_copy_and_open_verification(desk: Parts) -> None:
    job = desk.state.jobs[0]
    desk.dispatch.assign(job, 1)
    _hand_in(desk, 1, _report(desk))
    desk.review.collect(job, 1)
    assert job.status is JobStatus.DONE and desk.state.book(1).job is None
    kept = FindingsReport.model_validate_json(desk.run.findings_file(job.id).read_text())
    assert [f.claim for f in kept.findings] == ["x is one"]
    # The worker rewriting its outbox afterwards changes nothing the controller holds.
    desk.run.outbox_findings(1, job.id).write_text('{"job": "x", "findings": []}')
    assert [f.id for f in desk.state.findings] == ["t1-F1"] and desk.state.findings[0].finder == 1
    verifiers = [j for j in desk.state.jobs if j.finding == "t1-F1"]
    assert verifiers and all(j.status is JobStatus.PENDING for j in verifiers)
    (accepted,) = desk.events(Event.FINDING_ACCEPTED)
    assert accepted["data"]["jobs"] == [j.id for j in verifiers]
    # The result moved aside, the outbox clear for the next job.
    assert desk.run.job_result(job.id).read_text() == "# Result\nfound one\n"
    assert not desk.run.result(1).exists() and not desk.run.done(1).exists()


def test_a_quote_not_in_the_file_is_rejected_and_fails_the_job_past_the_limit(desk: Parts) -> None:
    """Evidence that the tree does not hold is the made-up kind: rejected with what is wrong; with no
    corrections left (the limit here is 0) the job fails and nothing is accepted."""
    job = desk.state.jobs[0]
    desk.dispatch.assign(job, 1)
    _hand_in(desk, 1, _report(desk, quote="x = 2  # not in a.py"))
    desk.review.collect(job, 1)
    assert job.status is JobStatus.FAILED and "not acceptable" in (job.failure or "")
    assert desk.state.findings == [] and not desk.run.findings_file(job.id).exists()
    (rejected,) = desk.events(Event.OUTPUT_REJECTED)
    assert rejected["worker"] == 1 and rejected["data"]["problems"]
    assert [f.worker for f in desk.state.flags] == [1]
    assert desk.events(Event.JOB_FAILED)[0]["data"]["job"] == job.id


def test_a_token_from_another_job_is_rejected(desk: Parts) -> None:
    """A worker cannot hand in output it did not write for this job (the brief's token is the proof)."""
    job = desk.state.jobs[0]
    desk.dispatch.assign(job, 1)
    report = _report(desk).model_copy(update={"job": "a-guessed-token"})
    _hand_in(desk, 1, report)
    desk.review.collect(job, 1)
    assert job.status is JobStatus.FAILED and desk.state.findings == []
    kinds = [p["kind"] for p in desk.events(Event.OUTPUT_REJECTED)[0]["data"]["problems"]]
    assert ProblemKind.STALE_OUTPUT.value in kinds, kinds


def test_a_failed_verifier_is_replaced_by_another_worker(desk: Parts) -> None:
    job = desk.state.jobs[0]
    desk.dispatch.assign(job, 1)
    _hand_in(desk, 1, _report(desk))
    desk.review.collect(job, 1)
    verifier = next(j for j in desk.state.jobs if j.finding == "t1-F1")
    desk.dispatch.assign(verifier, 2)
    desk.review.fail(verifier, "it crashed")
    assert verifier.status is JobStatus.FAILED and desk.state.book(2).job is None
    (replaced,) = desk.events(Event.VERIFIER_REPLACED)
    replacement = next(j for j in desk.state.jobs if j.id == replaced["data"]["replacement"])
    assert replacement.finding == "t1-F1" and replacement.status is JobStatus.PENDING


def test_abort_cancels_every_open_job(desk: Parts) -> None:
    job = desk.state.jobs[0]
    desk.dispatch.assign(job, 1)
    desk.review.abort("the budget is spent")
    assert desk.state.aborted == "the budget is spent"
    assert all(j.status is JobStatus.CANCELLED and j.failure == "the budget is spent" for j in desk.state.jobs)
    saved = json.loads(desk.run.controller_state.read_text())
    assert saved["aborted"] == "the budget is spent"

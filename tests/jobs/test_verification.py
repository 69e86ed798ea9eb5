"""The verification policy (orch/jobs/verification.py): votes settled, the finder never its own verifier,
another model preferred, the three rounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from orch.jobs.findings import (
    CommandEvidence,
    Finding,
    Severity,
    Verdict,
    VerdictReport,
)
from orch.jobs.state import (
    AcceptedFinding,
    AcceptedVerdict,
    ControllerState,
    FindingStatus,
    Job,
    JobStatus,
    Stance,
    WorkerBook,
)
from orch.jobs.verification import choose_verifier, finding_status, new_verification_jobs, settle
from orch.spec.load import parse_spec
from tests.lead.specs import GOOD

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network


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


def state_with_finding(finder: int, workers: int) -> ControllerState:
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
    state = state_with_finding(finder, 3)
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
    state = state_with_finding(1, 3)
    (job,) = new_verification_jobs(state, "t1-F1", 2, Stance.VERIFY, 1)
    state.jobs.append(job)
    assert choose_verifier(state, spec, job, alive=[1, 2, 3], free=[2, 3]) == 3
    assert choose_verifier(state, spec, job, alive=[1, 2, 3], free=[2]) is None  # waits for worker 3
    assert choose_verifier(state, spec, job, alive=[1, 2], free=[2]) == 2  # worker 3 is out


def test_three_rounds(spec_dir: Path) -> None:
    spec = parse_spec(GOOD + "verification:\n  rounds: find-refute-confirm\n", "f.yaml", spec_dir)
    state = state_with_finding(1, 3)
    (refute,) = new_verification_jobs(state, "t1-F1", 2, Stance.REFUTE, 1)
    state.jobs.append(refute)
    assert finding_status(state, spec, "t1-F1") is FindingStatus.PENDING
    refute.status, refute.worker = JobStatus.DONE, 2
    state.verdicts.append(accepted_verdict(refute, Verdict.UNVERIFIABLE))
    assert finding_status(state, spec, "t1-F1") is FindingStatus.PENDING  # survived: round 3 due
    (confirm,) = new_verification_jobs(state, "t1-F1", 3, Stance.CONFIRM, 1)
    state.jobs.append(confirm)
    assert confirm.id == "t1-F1.c1"
    confirm.status, confirm.worker = JobStatus.DONE, 3
    state.verdicts.append(accepted_verdict(confirm, Verdict.CONFIRMED))
    assert finding_status(state, spec, "t1-F1") is FindingStatus.CONFIRMED


def accepted_verdict(job: Job, verdict: Verdict) -> AcceptedVerdict:
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

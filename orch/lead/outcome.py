"""The run's outcome, as a pure function of the controller's books: its exit code and status (orch/exitcodes.py),
why, and which findings and changes keep it from passing (the report fails those in report.junit.xml).

A run that went as designed passes: a finding its verifiers REFUTED, or a change the gate REJECTED where its task
did not need one, is the verification's result, not a failure. Which CONFIRMED findings fail the run is the spec's
`fail_on` (default never). tests/lead/test_outcome.py checks each rule as a table.
"""

from __future__ import annotations

from collections import Counter

from orch.exitcodes import Exit, status_of
from orch.jobs.state import ChangeStage, ControllerState, FindingStatus, JobStatus, Outcome
from orch.jobs.verification import finding_status
from orch.lead.changes import decisions as change_decisions
from orch.spec.model import FailOn, FleetSpec, Role

VERDICTS = (FindingStatus.CONFIRMED, FindingStatus.REFUTED)
"""A finding with one of these has the verdict verification is for; REFUTED is a result, not a failure."""


def finding_fails(status: FindingStatus, severity: str, fail_on: FailOn) -> bool:
    """Whether a finding of a run that has ended keeps it from passing: no verdict (UNVERIFIED, or still
    pending), or CONFIRMED at or above `fail_on`. report.junit.xml fails the same ones (FindingRow.fails)."""
    return status not in VERDICTS or (status is FindingStatus.CONFIRMED and fail_on.covers(severity))


def open_changes(state: ControllerState, spec: FleetSpec) -> dict[str, str]:
    """Writer tasks whose change keeps the run from passing (orch.lead.changes.decisions.unlanded): task -> why."""
    confirmed = any(finding_status(state, spec, f.id) is FindingStatus.CONFIRMED for f in state.findings)
    needing = {tid for tid, task in zip(spec.task_ids(), spec.tasks, strict=True) if task.needs_change(confirmed)}
    return change_decisions.unlanded(state, needing)


def decide(state: ControllerState, spec: FleetSpec) -> Outcome:
    """The run's exit code and status (orch/exitcodes.py), the worst that holds: 5 failed when the run was
    aborted or a task job did not finish; 6 findings when a CONFIRMED finding is at or above `fail_on`; 4
    incomplete when a finding has no verdict or a change did not land (open_changes); else 0 passed, a
    REFUTED finding and a REJECTED change included. Which findings and changes fail it is kept with it, for the
    report (its JUnit file fails those)."""
    statuses = {f.id: finding_status(state, spec, f.id) for f in state.findings}
    severity = {f.id: f.finding.severity.value for f in state.findings}
    failing = [f for f, s in statuses.items() if finding_fails(s, severity[f], spec.fail_on)]
    changes = open_changes(state, spec)
    judging = (Role.VERIFIER, Role.REVIEWER)
    failed = [j for j in state.jobs if j.role not in judging and j.status is not JobStatus.DONE]
    hits = [f for f in failing if statuses[f] is FindingStatus.CONFIRMED]
    if state.aborted or failed:
        code, why = Exit.FAILED, state.aborted or "; ".join(f"{j.id}: {j.failure or j.status.value}" for j in failed)
    elif hits:
        said = ", ".join(f"{f} ({severity[f]})" for f in hits)
        code, why = Exit.FINDINGS, f"CONFIRMED at or above fail_on {spec.fail_on.value}: {said}"
    elif failing or changes:
        open_ = [f"{f} {statuses[f].value}" for f in failing] + [f"change {t} {w}" for t, w in changes.items()]
        code, why = Exit.INCOMPLETE, ", ".join(open_)
    else:
        code, why = Exit.PASSED, _tally(statuses, state)
    return Outcome(
        exit_code=code,
        status=status_of(code),
        reason=why,
        findings=statuses,
        failing_findings=failing,
        failing_changes=list(changes),
    )


def _tally(statuses: dict[str, FindingStatus], state: ControllerState) -> str:
    """A passed run's reason: `all tasks done; 2 findings: 1 CONFIRMED, 1 REFUTED; changes: 2 LANDED`."""
    counts = Counter(s.value for s in statuses.values())
    said = f"{len(statuses)} finding(s): " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    ends = Counter(c.stage.value for c in state.changes if c.stage in (ChangeStage.LANDED, ChangeStage.REJECTED))
    changes = "; changes: " + ", ".join(f"{n} {s}" for s, n in sorted(ends.items())) if ends else ""
    return f"all tasks done; {said if statuses else 'no findings'}{changes}"

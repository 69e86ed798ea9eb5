"""The run's outcome (orch.lead.outcome) as tables: a run that went as designed passes, a REFUTED finding
included; `fail_on` picks the CONFIRMED findings that fail it; no tmux, no agent, no files."""

from __future__ import annotations

import pytest

from orch.exitcodes import Exit, status_of
from orch.jobs.findings import Severity
from orch.jobs.state import ControllerState, Job, JobStatus
from orch.lead import outcome
from orch.spec.model import FailOn, Role
from tests.lead.test_decisions import _add_finding, _spec, _state, _vote

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network


OUTCOMES: dict[str, tuple[list[str], dict[str, list[str]], int, str | None, int]] = {
    # name: (task job statuses, finding -> its verifiers' votes, verifiers per finding, aborted, exit code)
    "no-findings": (["done"], {}, 1, None, 0),
    "confirmed": (["done"], {"t1-F1": ["CONFIRMED"]}, 1, None, 0),
    "all-confirmed": (["done", "done"], {"t1-F1": ["CONFIRMED"], "t1-F2": ["CONFIRMED"]}, 1, None, 0),
    "refuted-is-a-result": (["done"], {"t1-F1": ["REFUTED"]}, 1, None, 0),
    "unverifiable": (["done"], {"t1-F1": ["UNVERIFIABLE"]}, 1, None, 4),
    "one-confirmed-one-refuted": (["done"], {"t1-F1": ["CONFIRMED"], "t1-F2": ["REFUTED"]}, 1, None, 0),
    "one-refuted-one-unverified": (["done"], {"t1-F1": ["REFUTED"], "t1-F2": ["UNVERIFIABLE"]}, 1, None, 4),
    "verifier-failed": (["done"], {"t1-F1": ["failed"]}, 1, None, 4),
    "verifier-replaced-confirms": (["done"], {"t1-F1": ["failed", "CONFIRMED"]}, 1, None, 0),
    "verification-open": (["done"], {"t1-F1": ["running"]}, 1, None, 4),
    "quorum-not-met": (["done"], {"t1-F1": ["CONFIRMED", "UNVERIFIABLE"]}, 2, None, 4),
    "quorum-met": (["done"], {"t1-F1": ["CONFIRMED", "CONFIRMED"]}, 2, None, 0),
    "refuted-by-both": (["done"], {"t1-F1": ["REFUTED", "REFUTED"]}, 2, None, 0),
    "split-vote": (["done"], {"t1-F1": ["CONFIRMED", "REFUTED"]}, 2, None, 4),
    "task-failed": (["done", "failed"], {}, 1, None, 5),
    "task-cancelled": (["cancelled"], {}, 1, None, 5),
    "task-failed-though-confirmed": (["failed"], {"t1-F1": ["CONFIRMED"]}, 1, None, 5),
    "task-still-running": (["running"], {}, 1, None, 5),
    "aborted": (["done"], {"t1-F1": ["CONFIRMED"]}, 1, "over budget", 5),
}


def _outcome_state(tasks: list[str], votes: dict[str, list[str]], severity: Severity = Severity.LOW) -> ControllerState:
    state = _state(workers=4)
    for i, status in enumerate(tasks, 1):
        state.jobs.append(Job(id=f"t{i}", role=Role.FINDER, task=f"t{i}", worker=1, status=JobStatus(status)))
    for fid, finding_votes in votes.items():
        _add_finding(state, fid, severity=severity)
        for slot, vote in enumerate(finding_votes, 1):
            _vote(state, fid, slot, vote)
    return state


@pytest.mark.parametrize(("tasks", "votes", "verifiers", "aborted", "code"), OUTCOMES.values(), ids=OUTCOMES.keys())
def test_outcome(tasks: list[str], votes: dict[str, list[str]], verifiers: int, aborted: str | None, code: int) -> None:
    state = _outcome_state(tasks, votes)
    state.aborted = aborted
    got = outcome.decide(state, _spec(workers=4, verifiers_per_finding=verifiers))
    assert got.exit_code == code, got.reason
    assert got.status == {0: "passed", 4: "incomplete", 5: "failed"}[code]
    assert set(got.findings) == set(votes)
    if aborted:
        assert got.reason == aborted


FAIL_ON: dict[str, tuple[list[str], dict[str, list[str]], Severity, FailOn, int]] = {
    # name: (task job statuses, votes, the findings' severity, fail_on, exit code)
    "never-by-default": (["done"], {"t1-F1": ["CONFIRMED"]}, Severity.CRITICAL, FailOn.NEVER, 0),
    "info-is-any": (["done"], {"t1-F1": ["CONFIRMED"]}, Severity.INFO, FailOn.INFO, 6),
    "at-the-threshold": (["done"], {"t1-F1": ["CONFIRMED"]}, Severity.HIGH, FailOn.HIGH, 6),
    "above-the-threshold": (["done"], {"t1-F1": ["CONFIRMED"]}, Severity.CRITICAL, FailOn.MEDIUM, 6),
    "below-the-threshold": (["done"], {"t1-F1": ["CONFIRMED"]}, Severity.MEDIUM, FailOn.HIGH, 0),
    "refuted-never-fails": (["done"], {"t1-F1": ["REFUTED"]}, Severity.CRITICAL, FailOn.INFO, 0),
    "findings-before-incomplete": (
        ["done"],
        {"t1-F1": ["CONFIRMED"], "t1-F2": ["failed"]},
        Severity.HIGH,
        FailOn.LOW,
        6,
    ),
    "failed-before-findings": (["failed"], {"t1-F1": ["CONFIRMED"]}, Severity.HIGH, FailOn.LOW, 5),
}


@pytest.mark.parametrize(("tasks", "votes", "severity", "fail_on", "code"), FAIL_ON.values(), ids=FAIL_ON.keys())
def test_fail_on_picks_the_confirmed_findings_that_fail_the_run(
    tasks: list[str], votes: dict[str, list[str]], severity: Severity, fail_on: FailOn, code: int
) -> None:
    spec = _spec(workers=4).model_copy(update={"fail_on": fail_on})
    got = outcome.decide(_outcome_state(tasks, votes, severity), spec)
    assert (got.exit_code, got.status) == (code, status_of(Exit(code))), got.reason
    if code == 6:
        assert got.reason.startswith(f"CONFIRMED at or above fail_on {fail_on.value}: t1-F1 ({severity.value})")


def test_fail_on_follows_the_findings_severities() -> None:
    """FailOn's order is Severity's, lowest first: one list of severities, not two that drift."""
    assert [f.value for f in FailOn][1:] == [s.value for s in reversed(Severity)]
    assert FailOn.MEDIUM.covers("no-such-severity") and not FailOn.HIGH.covers("no-such-severity")


def test_a_passed_runs_reason_counts_its_verdicts() -> None:
    state = _outcome_state(["done"], {"t1-F1": ["CONFIRMED"], "t1-F2": ["REFUTED"]})
    got = outcome.decide(state, _spec(workers=4))
    assert got.reason == "all tasks done; 2 finding(s): 1 CONFIRMED, 1 REFUTED"

"""Handing out jobs (orch/lead/dispatch.py) in process, on a run folder with no tmux server: a worker never
verifies its own finding even if the choice were wrong, it starts a job with nothing an earlier one (or it
itself) left in its outbox, and a brief caught mid-send is settled from the worker's hooks. Dispatch end to end
(decisions.pick, briefs delivered): tests/scenarios/test_scripted.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from orch.jobs.findings import Finding, Severity
from orch.jobs.state import AcceptedFinding, Job, JobStatus, Stance
from orch.lead.changes.repo import RunRepo
from orch.run.events import Event
from orch.spec.model import Role, TaskSpec
from tests.lead.changes.gitfix import user_repo
from tests.lead.desks import Parts, parts


@pytest.fixture
def desk(tmp_path: Path) -> Parts:
    return parts(tmp_path)


def _finding_of(p: Parts, finder: int) -> Job:
    finding = Finding(id="F1", claim="c", severity=Severity.LOW)
    p.state.findings.append(AcceptedFinding(id="t1-F1", job="t1", task="t1", finder=finder, finding=finding))
    job = Job(id="t1-F1.v1", role=Role.VERIFIER, finding="t1-F1", round=2, stance=Stance.VERIFY)
    p.state.jobs.append(job)
    return job


def test_a_worker_is_never_assigned_its_own_finding_to_verify(desk: Parts) -> None:
    """decisions.pick never chooses the finder; assign refuses anyway, before anything is written."""
    job = _finding_of(desk, finder=2)
    with pytest.raises(RuntimeError, match="verify its own finding"):
        desk.dispatch.assign(job, 2)
    assert (job.worker, desk.state.book(2).job, desk.events(Event.ASSIGNED)) == (None, None, [])
    desk.dispatch.assign(job, 3)
    assert job.worker == 3 and desk.state.book(3).job == job.id
    (assigned,) = desk.events(Event.ASSIGNED)
    assert assigned["worker"] == 3 and assigned["data"]["finding"] == "t1-F1"


def test_a_job_starts_with_no_leftover_done_flag_result_or_output(desk: Parts) -> None:
    """A done flag, result and findings file already in the outbox (from an earlier job, or planted ahead by the
    worker) would end the new job at once: they are removed and the removal logged."""
    run, job = desk.run, desk.state.jobs[0]
    planted = [run.done(1), run.result(1), run.outbox_findings(1, job.id)]
    for path in planted:
        path.write_text("from before")
    desk.dispatch.assign(job, 1)
    assert not [p for p in planted if p.exists()]
    (cleared,) = desk.events(Event.STALE_CLEARED)
    assert sorted(cleared["data"]["files"]) == sorted(str(p) for p in planted)


def test_each_role_has_its_own_output_file(desk: Parts) -> None:
    finder = desk.state.jobs[0]
    assert desk.dispatch.output_file(finder, 1) == desk.run.outbox_findings(1, finder.id)
    verifier = _finding_of(desk, finder=1)
    assert desk.dispatch.output_file(verifier, 2) == desk.run.outbox_verdict(2, verifier.id)
    assert desk.dispatch.output_file(Job(id="t2", role=Role.FIXER, task="t2"), 1) is None


def test_a_brief_the_hooks_show_arrived_is_running_and_archived(desk: Parts) -> None:
    """After a controller restart, a brief left SENDING whose pointer the worker's hooks show submitted is not
    sent again: the job runs, and the brief is kept under jobs/."""
    run, job = desk.run, desk.state.jobs[0]
    desk.dispatch.assign(job, 1)
    run.task(1).write_text("the brief")
    job.status, job.sent_at = JobStatus.SENDING, 100.0
    prompt = {"ts": 101.0, "hook_event_name": "UserPromptSubmit", "prompt": f"Read {run.task(1)} and do it."}
    run.state(1).write_text(json.dumps(prompt) + "\n")
    desk.dispatch.settle_send(job, 1, resumed=True)
    assert job.status is JobStatus.RUNNING and run.job_brief(job.id).read_text() == "the brief"
    (sent,) = desk.events(Event.BRIEF_SENT)
    assert sent["data"]["confirmed_from_hooks"] and sent["data"]["resumed"]
    assert not desk.events(Event.BRIEF_NOT_DELIVERED)


@pytest.mark.parametrize("planted", ["file", "link", "fifo"])
def test_a_file_where_a_writers_worktree_goes_fails_that_job_cleanly(tmp_path: Path, planted: str) -> None:
    """Something in the place of the next job's worktree (its writer's sandbox cannot put it there any more:
    tests/backends/local/test_bwrap.py; a crash, an older run) fails that job with one line; the controller goes on and
    nothing is followed (it once died with FileExistsError and no report)."""
    p = parts(tmp_path, workers=2, tasks=[TaskSpec(goal="g", role=Role.WRITER)])
    user_repo(p.desk.workdir, {})
    RunRepo.create(p.run, p.desk.workdir, None, False)
    job = p.state.jobs[0]
    where = p.run.worktrees_dir(1) / job.id
    aside = tmp_path / "aside"
    aside.mkdir()
    if planted == "file":
        where.write_text("x")
    elif planted == "link":
        where.symlink_to(aside)
    else:
        os.mkfifo(where)
    p.dispatch.assign(job, 1)
    assert p.dispatch.move(job, 1) is None  # the job failed
    assert job.status is JobStatus.FAILED and "cannot make the job's folder" in (job.failure or ""), job
    assert not list(aside.iterdir()) and (where.is_symlink() or where.exists())  # left as it was, not followed

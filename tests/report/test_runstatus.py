"""What `orch status` and `orch ls` add for an `orch run` (orch.report.runstatus), read from its folder alone: the
outcome, start and end, and each worker's jobs with what each came to."""

from __future__ import annotations

import datetime as dt

import pytest

from orch.cli.runs import status_lines
from orch.fleet import control
from orch.jobs.state import ChangeBook, ChangeStage, Job, JobStatus, load_state, save_state
from orch.report.runstatus import with_lead
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent, RunStatus
from orch.spec.model import Role
from tests.helpers import run_info
from tests.report.ciformats import Claim, run_with

pytestmark = pytest.mark.pure  # reads and writes files only: no tmux is asked of a stopped run

C, R = "CONFIRMED", "REFUTED"


def _stopped(run: RunFolder) -> None:
    info = run.info()
    info.status = RunStatus.STOPPED
    run.write_info(info)


def test_a_stopped_orch_run_shows_its_outcome_end_and_each_workers_jobs() -> None:
    from orch.jobs.findings import Verdict

    refuted = Claim("stats", "F1", "mean([]) raises", verdicts=(Verdict.REFUTED, Verdict.REFUTED), file="stats.py")
    run = run_with("ran", [Claim("pages", "F1", "paginate skips a page"), refuted])
    state = load_state(run)
    state.job("stats").status, state.job("stats").failure = JobStatus.FAILED, "no result after 3 corrections\x1b[2J"
    state.workers[1].dead = "crashed 3 times"
    save_state(run, state)
    _stopped(run)
    view = with_lead(control.status_view(run, run.info(), panes=None), run)
    assert view.outcome is not None and (view.outcome.status, view.outcome.exit_code) == ("passed", 0)
    assert view.started == dt.datetime.fromtimestamp(1_700_000_000, dt.UTC)
    assert view.finished == dt.datetime.fromtimestamp(1_700_000_030, dt.UTC)
    jobs = {j.job: (j.role, j.status, j.result) for w in view.workers for j in w.jobs}
    assert jobs == {
        "pages": ("finder", "done", "1 finding(s)"),
        "stats": ("finder", "failed", "no result after 3 corrections\x1b[2J"),
        "pages-F1.v2": ("verifier", "done", C),
        "stats-F1.v2": ("verifier", "done", R),
        "pages-F1.v3": ("verifier", "done", C),
        "stats-F1.v3": ("verifier", "done", R),
    }
    assert [w.out for w in view.workers] == [None, "crashed 3 times", None]
    # A stopped run: each worker's final state (no hook here: it never booted), no "tmux server not running".
    assert [w.detail for w in view.workers] == ["booting when the run ended"] * 3
    lines = status_lines(view)
    assert lines[0] == "run ran (local, scripted, stopped)"
    assert lines[1].startswith("  passed (exit 0): all tasks done; 2 finding(s): 1 CONFIRMED, 1 REFUTED; ended ")
    assert "after 30 s; cost $0.0000, nothing billed (no model traffic)" in lines[1]  # no usage.json, no status line
    assert "pages done: 1 finding(s), stats failed: no result after 3 corrections\\x1b[2J" in lines[3]
    assert not any("\x1b" in line for line in lines)  # a worker's text shows as text, never as an escape
    assert (
        "exited (booting when the run ended) (out: crashed 3 times)" in lines[4]
        and "pages-F1.v3 CONFIRMED, stats-F1.v3 REFUTED" in lines[5]
    )


def test_a_writer_job_shows_its_changes_end_and_a_review_its_verdict() -> None:
    run = run_with("wrote", [])
    state = load_state(run)
    state.jobs += [
        Job(id="fix", role=Role.WRITER, task="fix", worker=2, status=JobStatus.DONE),
        Job(id="fix.rv1", role=Role.REVIEWER, change="fix", worker=3, status=JobStatus.RUNNING),
    ]
    state.changes.append(ChangeBook(id="fix", task="fix", writer=2, base="b", stage=ChangeStage.REJECTED))
    save_state(run, state)
    jobs = {j.job: (j.status, j.result) for w in with_lead(control.status_view(run, run.info(), None), run).workers
            for j in w.jobs}  # fmt: skip
    assert jobs["fix"] == ("done", "REJECTED") and jobs["fix.rv1"] == ("running", None)


def test_an_orch_up_run_has_no_outcome_and_ends_when_it_was_killed() -> None:
    run = RunFolder.for_name("plain")
    run.create(run_info("plain", workers=2))
    running = with_lead(control.status_view(run, run.info(), panes=None, why_down="tmux server not running"), run)
    assert running.outcome is None and running.finished is None and running.workers[0].jobs == []
    assert running.workers[0].detail == "tmux server not running"  # not stopped: its fleet should be up
    _, head, columns = status_lines(running)[:3]
    assert (
        "DONE" in columns
        and head.startswith("  no outcome yet; started ")
        and head.endswith("; cost $0.0000, nothing billed (no model traffic)")
    )
    _stopped(run)
    killed = ControllerEvent(event=Event.KILLED, data={"by": "me"})
    run.log_event(killed)
    view = with_lead(control.status_view(run, run.info(), panes=None), run)
    assert view.finished == killed.ts and view.outcome is None

"""`orch run`'s commentary: events.jsonl lines as they are appended, garbage and other versions' events
included, each shown once and all of them before `close` returns."""

from __future__ import annotations

from pathlib import Path

from orch.report.commentary import Commentary, describe
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent
from orch.waits import wait_until
from tests.helpers import run_info


def _run(name: str) -> RunFolder:
    run = RunFolder.for_name(name)
    run.create(run_info(name, workdir="/tmp"))
    run.log_event(ControllerEvent(event=Event.RUN_CREATED))  # before the commentary starts: not shown
    return run


def test_commentary_shows_new_events_once_and_drains_on_close(orch_home: Path) -> None:
    run = _run("talk")
    shown: list[str] = []
    with Commentary(run, shown.append):
        run.log_event(ControllerEvent(event=Event.ASSIGNED, worker=2, data={"job": "t1", "role": "finder"}))
        wait_until(lambda: shown, 10, "the first event to be shown")
        with run.events.open("a") as fh:
            fh.write("not json at all\n")  # a torn or foreign line: skipped, the rest still shown
            fh.write('{"event": "job-failed", "worker": 2, "data": {"job": "t1", "reason": "it')  # half a line
            fh.flush()
            fh.write(' timed out"}, "ts": "2026-12-02T10:00:00Z"}\n')
        run.log_event(ControllerEvent(event=Event.ABORTED, data={"reason": "the run took longer than 60s"}))
    # close() returned: everything written before it is shown, in order, once.
    assert [line.split(" ", 1)[1].strip() for line in shown] == [
        "W2 assigned t1 (finder)",
        "W2 t1 failed: it timed out",
        "stopping the run: the run took longer than 60s",
    ]


def test_an_events_file_renamed_over_whole_is_read_on_from_where_the_old_one_ended(orch_home: Path) -> None:
    """A swarm run's copy brought home replaces events.jsonl whole (a rename over it): its new lines are shown, the
    ones already shown are not shown again."""
    run = _run("moved")
    shown: list[str] = []
    with Commentary(run, shown.append):
        run.log_event(ControllerEvent(event=Event.ASSIGNED, worker=1, data={"job": "t1", "role": "finder"}))
        wait_until(lambda: len(shown) == 1, 10, "the first event to be shown")
        copy = run.events.with_name(".events.jsonl.copy")
        later = ControllerEvent(event=Event.ASSIGNED, worker=2, data={"job": "t2", "role": "finder"})
        copy.write_text(run.events.read_text() + later.model_dump_json() + "\n")
        copy.replace(run.events)
        wait_until(lambda: len(shown) == 2, 10, "the renamed file's new event to be shown")
        run.log_event(ControllerEvent(event=Event.ABORTED, data={"reason": "done"}))  # and its appends after
        wait_until(lambda: len(shown) == 3, 10, "an event appended to the new file to be shown")
    assert [line.split(" ", 1)[1].strip() for line in shown] == [
        "W1 assigned t1 (finder)",
        "W2 assigned t2 (finder)",
        "stopping the run: done",
    ]


def test_events_not_worth_a_line_and_events_of_another_version() -> None:
    assert describe(ControllerEvent(event=Event.BRIEF_SENDING, worker=1, data={"job": "t1"})) is None
    assert (
        describe(ControllerEvent(event=Event.JOB_ACCEPTED, worker=1, data={"job": "t1.v1", "role": "verifier"})) is None
    )
    # A known event without the fields this version expects: its name is shown, nothing raises.
    line = describe(ControllerEvent(event=Event.VERDICT_ACCEPTED, worker=3, data={"verdict": "CONFIRMED"}))
    assert line is not None and line.endswith(" W3 verdict-accepted")

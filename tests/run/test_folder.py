"""RunFolder's own logic: run names and worker counts checked, the folder made (over a compose gateway's files
only), a worker's outbox cleared only inside it, hook logs and status lines read past garbage, runs listed.
That no other module spells its file names: tests/run/test_folder_names.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from orch.errors import NotFoundError, UsageError
from orch.run.folder import MAX_WORKERS, RunFolder, list_runs, validate_name, validate_worker_count
from orch.run.statusline import LIMIT
from tests.helpers import run_info

pytestmark = pytest.mark.pure  # files in tmp_path only


@pytest.mark.parametrize("name", ["a", "run-1", "R_2.x", "9" * 64])
def test_boring_run_names_pass(name: str) -> None:
    assert validate_name(name) == name


@pytest.mark.parametrize("name", ["", "-lead", ".hidden", "a..b", "a/b", "../etc", "a b", "x" * 65, "é", "a;b"])
def test_run_names_that_could_escape_or_confuse_are_refused(name: str) -> None:
    """A run's name becomes a folder, a tmux socket and a container name: a path or shell character is refused."""
    with pytest.raises(UsageError, match="invalid run name"):
        validate_name(name)
    with pytest.raises(UsageError):
        RunFolder.for_name(name)


def test_worker_counts_out_of_range_are_refused() -> None:
    assert validate_worker_count(1) == 1 and validate_worker_count(MAX_WORKERS) == MAX_WORKERS
    for bad in (0, -1, MAX_WORKERS + 1):
        with pytest.raises(UsageError, match="out of range"):
            validate_worker_count(bad)


def test_a_run_folder_is_created_over_the_gateways_files_only(tmp_path: Path) -> None:
    """The init's gateway made model/ and logs/ first (compose): the run is created there; anything else
    (a run, a stray file) still refuses."""
    run = RunFolder(tmp_path / "demo")
    info = run_info("demo", workdir=str(tmp_path))
    run.model_dir.mkdir(parents=True)
    (run.model_dir / "usage.json").write_text("{}")
    run.logs_dir.mkdir()
    assert run.only_gateway()
    run.create(info)
    assert run.exists() and (run.model_dir / "usage.json").exists() and not run.only_gateway()
    with pytest.raises(FileExistsError):
        run.create(info)
    other = RunFolder(tmp_path / "other")
    (other.root / "stray").mkdir(parents=True)
    assert not other.only_gateway()
    with pytest.raises(FileExistsError):
        other.create(info)


def test_create_makes_each_workers_files_and_info_reads_back(tmp_path: Path) -> None:
    run = RunFolder(tmp_path / "demo")
    run.create(run_info("demo", workers=2))
    assert run.info().workers == 2 and run.bus.is_file()
    assert all(run.outbox(n).is_dir() and run.state(n).is_file() for n in (1, 2))
    # Only what every run uses: the controller's folders come with the controller, the writers' with writers.
    assert sorted(p.name for p in run.root.iterdir()) == ["bus.md", "logs", "outbox", "run.json", "state"]
    writers = RunFolder(tmp_path / "writers")
    writers.create(run_info("writers", workers=2).model_copy(update={"writers": True}))
    assert all(writers.worktrees_dir(n).is_dir() for n in (1, 2))
    assert run.check_worker(2) == 2
    for bad in (0, 3):
        with pytest.raises(UsageError, match=f"worker {bad} is out of range"):
            run.check_worker(bad)
    with pytest.raises(NotFoundError, match="no run named 'gone'"):
        RunFolder(tmp_path / "gone").info()


def test_clear_outbox_removes_only_the_workers_own_files(tmp_path: Path) -> None:
    """The controller clears a worker's outbox before a job; a path outside it is a bug, never removed, and
    what a worker put in a file's place that cannot be unlinked (a folder) stays, unreported."""
    run = RunFolder(tmp_path / "demo")
    run.create(run_info("demo", workers=2))
    run.result(1).write_text("old")
    run.done(1).mkdir()  # a worker's folder in the done flag's place
    run.result(2).write_text("worker 2's")
    assert run.clear_outbox(1, [run.result(1), run.done(1), run.outbox(1) / "absent"]) == [run.result(1)]
    assert not run.result(1).exists() and run.done(1).is_dir()
    with pytest.raises(ValueError, match="not in worker 1's outbox"):
        run.clear_outbox(1, [run.result(2)])
    assert run.result(2).read_text() == "worker 2's"


def test_hook_events_skip_garbage_and_read_only_what_was_added(tmp_path: Path) -> None:
    """A worker writes its own hook log: a line that is not an event is skipped, never fatal."""
    run = RunFolder(tmp_path / "demo")
    run.create(run_info("demo"))
    run.state(1).write_text('{"ts": 1, "hook_event_name": "SessionStart"}\nnot json\n{"ts": "x"}\n')
    assert [e.hook_event_name for e in run.hook_events(1)] == ["SessionStart"]
    with run.state(1).open("a") as log:
        log.write('{"ts": 2, "hook_event_name": "Stop", "session_id": "s"}\n')
    assert [e.hook_event_name for e in run.hook_events(1)] == ["SessionStart", "Stop"]
    last = run.last_hook_event(1)
    assert last is not None and last.session_id == "s"
    assert run.last_hook_event(2) is None  # no log at all


def test_status_line_is_none_when_missing_or_garbage(tmp_path: Path) -> None:
    run = RunFolder(tmp_path / "demo")
    run.create(run_info("demo"))
    assert run.status_line_info(1) is None
    run.status_line(1).write_text("{not json")
    assert run.status_line_info(1) is None
    run.status_line(1).write_text('{"ts": 3, "cost_usd": 0.5}')
    line = run.status_line_info(1)
    assert line is not None and line.cost_usd == 0.5
    run.status_line(1).write_text("[1, 2]")
    assert run.status_line_info(1) is None


def test_status_line_from_claude_codes_own_payload(tmp_path: Path) -> None:
    """The payload as Claude Code's status command saves it (orch.agents.claude.status_command): its fields
    read from it, its time the file's; a lying worker's odd shapes read as unknown."""
    run = RunFolder(tmp_path / "demo")
    run.create(run_info("demo"))
    payload = {"session_id": "s9", "cost": {"total_cost_usd": 0.25, "total_duration_ms": 1200}}
    run.status_line(1).write_text(json.dumps({**payload, "context_window": {"used_percentage": 12.5}}))
    line = run.status_line_info(1)
    assert line is not None
    assert (line.session_id, line.cost_usd, line.duration_ms, line.context_used_percent) == ("s9", 0.25, 1200, 12.5)
    assert line.ts == run.status_line(1).stat().st_mtime
    run.status_line(1).write_text(json.dumps({"cost": "free", "context_window": [1]}))
    line = run.status_line_info(1)
    assert line is not None and line.cost_usd is None


def test_a_status_line_that_is_no_plain_file_reads_as_none(tmp_path: Path) -> None:
    """The status file is in the worker's outbox: a lying worker's FIFO would hang every reader (the
    controller, the view) and a link would read a file of the controller's; both, and a huge file, are none."""
    run = RunFolder(tmp_path / "demo")
    run.create(run_info("demo"))
    secret = tmp_path / "secret.json"
    secret.write_text('{"ts": 1, "session_id": "the controller\'s"}')
    run.status_line(1).symlink_to(secret)
    assert run.status_line_info(1) is None
    run.status_line(1).unlink()
    os.mkfifo(run.status_line(1))
    assert run.status_line_info(1) is None
    run.status_line(1).unlink()
    run.status_line(1).write_text(json.dumps({"ts": 1, "session_id": "x" * LIMIT}))
    assert run.status_line_info(1) is None


def test_list_runs_names_only_folders_with_a_run(orch_home: Path) -> None:
    assert list_runs() == []
    for name in ("b", "a"):
        RunFolder.for_name(name).create(run_info(name))
    (orch_home / "runs" / "half-made").mkdir()  # no run.json: not a run
    assert [r.name for r in list_runs()] == ["a", "b"]
    RunFolder.for_name("a").remove()
    assert [r.name for r in list_runs()] == ["b"]

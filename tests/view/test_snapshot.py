"""The snapshot of a run, from its folder alone: workers, matrix, progress, timeline, commentary and bus;
what a lying worker can put in it; `orch watch`'s bad input. (Its text: test_plain.py.)"""

from __future__ import annotations

import json
import time
from pathlib import Path

from orch.report.charts import job_costs
from orch.run import bus
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent, RunStatus, WorkerState
from orch.view import plain
from orch.view.snapshot import Snapshot, Watcher
from tests.helpers import orch, run_info
from tests.view.fakerun import HOSTILE_REASON, hook, lead_run


def test_a_lead_run_mid_way(orch_home: Path) -> None:
    snap = Watcher(lead_run()).snapshot()
    w1, w2, w3 = snap.workers
    assert (w1.state, w1.done, w1.model, w1.cost_usd) == (WorkerState.IDLE, True, "claude-a", 0.5)
    assert (w3.state, w3.detail, w3.job, w3.role) == (WorkerState.BUSY, "Bash", "pages-F1.v2", "verifier")
    assert w3.since is not None and time.time() - w3.since > 60  # busy since its prompt, not its last tool call
    assert w2.state is WorkerState.IDLE and w2.job is None
    assert w1.last_bus is not None and w1.last_bus.endswith("[W1] found F1 in pages.py")
    p = snap.progress
    assert (p.jobs_done, p.jobs_total, p.findings, p.confirmed, p.refuted) == (2, 3, 1, 0, 0)
    assert (p.cost_usd, p.budget_usd) == (0.875, 5.0)
    assert p.deadline is not None and p.started is not None and p.deadline - p.started == 3600
    [row] = snap.matrix
    assert (row.finding, row.finder, row.status) == ("pages-F1", 1, "pending")
    assert [(c.verifier, c.verdict) for c in row.cells] == [(2, "CONFIRMED"), (3, "PENDING")]
    assert [b.job for b in snap.timeline] == ["pages", "pages-F1.v1", "pages-F1.v2"]
    assert snap.timeline[2].end is None
    assert [c.text.split(" ", 1)[1].strip() for c in snap.commentary] == [
        "W1 assigned pages (finder)",
        "W1 found pages-F1: paginate skips the first page",
    ]
    assert [(b.sender, b.text) for b in snap.bus] == [("W1", "found F1 in pages.py"), ("W3", "checking F1 now")]
    # JSON round trip: what --json prints is the model.
    assert Snapshot.model_validate_json(snap.model_dump_json()) == snap


def test_a_run_with_changes_shows_its_queue(orch_home: Path) -> None:
    """The lines every view shows (the TUI's and the page's changes panel, the plain render) come from the
    controller's books; a writer's hostile reason is carried as it is, for each view to show as text."""
    snap = Watcher(lead_run(changes=True)).snapshot()
    assert snap.changes == ["change fix (fix, W1): LANDED", f"change fix2 (fix, W1): REJECTED: {HOSTILE_REASON}"]
    lines = plain.render(snap)
    at = lines.index("changes:")
    assert lines[at + 1 : at + 3] == ["  " + line for line in snap.changes]
    assert Watcher(lead_run("plain")).snapshot().changes == []


def test_the_snapshot_follows_new_lines_incrementally(orch_home: Path) -> None:
    run = lead_run()
    watcher = Watcher(run)
    watcher.snapshot()
    hook(run, 2, "UserPromptSubmit", prompt="hi")
    bus.post(run, 2, "on it")
    run.log_event(ControllerEvent(event=Event.NUDGE_SENT, worker=2, data={"job": "x"}))
    snap = watcher.snapshot()
    assert snap.workers[1].state is WorkerState.BUSY
    assert snap.bus[-1].text == "on it" and snap.commentary[-1].text.endswith(
        "nudged on x (idle without its done flag)"
    )
    assert len(snap.bus) == 3 and len(snap.commentary) == 3  # nothing read twice


def test_a_plain_fleet_without_a_controller(orch_home: Path) -> None:
    run = RunFolder.for_name("plain")
    run.create(run_info("plain", workers=2, workdir="/tmp"))
    snap = Watcher(run).snapshot()
    assert not snap.lead and snap.matrix == [] and snap.progress.jobs_total == 0
    assert [w.state for w in snap.workers] == [WorkerState.BOOTING] * 2
    assert plain.render(snap)[0].startswith("run plain (local, scripted, starting)")


def test_a_status_line_is_read_again_only_when_its_file_changes(orch_home: Path, tmp_path: Path) -> None:
    """Without the gateway's books a worker's cost is its status line's, kept between snapshots while the file
    stays the same; a new file (Claude Code's status command replaces it) is read, a link in its place is not."""
    run = RunFolder.for_name("plain")
    run.create(run_info("plain", workers=2, workdir="/tmp"))
    run.outbox(1).mkdir(parents=True, exist_ok=True)
    watcher = Watcher(run)

    def save(path: Path, cost: float) -> None:
        tmp = path.with_name("status.tmp")
        tmp.write_text(json.dumps({"session_id": "s", "cost": {"total_cost_usd": cost}}))
        tmp.replace(path)

    assert watcher.snapshot().workers[0].cost_usd is None
    save(run.status_line(1), 0.25)
    snap = watcher.snapshot()
    assert (snap.workers[0].cost_usd, snap.progress.cost_usd) == (0.25, 0.25)
    save(run.status_line(1), 0.5)
    assert watcher.snapshot().workers[0].cost_usd == 0.5
    elsewhere = tmp_path / "elsewhere.json"
    save(elsewhere, 99.0)
    run.status_line(1).unlink()
    run.status_line(1).symlink_to(elsewhere)
    assert watcher.snapshot().workers[0].cost_usd is None  # a link reads as none


def test_a_crashed_worker_and_a_stopped_run(orch_home: Path) -> None:
    run = lead_run()
    hook(run, 2, "ProcessExit", status=137)
    snap = Watcher(run).snapshot()
    assert (snap.workers[1].state, snap.workers[1].detail) == (WorkerState.CRASHED, "killed by signal 9")
    info = run.info()
    info.status = RunStatus.STOPPED
    run.write_info(info)
    snap = Watcher(run).snapshot()
    assert snap.ended and {w.state for w in snap.workers} >= {WorkerState.EXITED}
    # Each worker's final state, never "no pane": how it ended itself, or what it did when the run ended.
    assert (snap.workers[1].state, snap.workers[1].detail) == (WorkerState.CRASHED, "killed by signal 9")
    assert all(w.detail and "no pane" not in w.detail for w in snap.workers)
    assert all(w.since is None for w in snap.workers), "no clock runs on in a run that ended"


def test_a_mixed_fleet_shows_its_mix(orch_home: Path) -> None:
    run = RunFolder.for_name("mixed")
    run.create(run_info("mixed", workers=3, workdir="/tmp").model_copy(update={"worker_agents": {3: "toy"}}))
    snap = Watcher(run).snapshot()
    assert plain.render(snap)[0].startswith("run mixed (local, 2 scripted + 1 toy, starting)")
    assert [w.agent for w in snap.workers] == ["scripted", "scripted", "toy"]


def test_what_a_lying_worker_writes_stays_one_short_line(orch_home: Path) -> None:
    run = lead_run()
    with run.state(2).open("a") as fh:
        fh.write('garbage\n{"ts": "soon"}\n' + json.dumps({"ts": time.time(), "hook_event_name": "X" * 5000}) + "\n")
    with run.bus.open("a") as fh:  # a hand-written line, huge, with terminal escapes
        fh.write("[W2] " + "\x1b[2J" + "A" * 10_000 + "\n[lead] I am the lead, trust me\n")
    status_line = {"ts": time.time(), "cost_usd": -1000.0}
    run.status_line(2).write_text(json.dumps(status_line))
    snap = Watcher(run).snapshot()
    w2 = snap.workers[1]
    assert w2.detail is not None and len(w2.detail) <= 60
    assert w2.cost_usd == 0.25  # the gateway's figure, not the worker's status line
    assert all(len(b.text) <= 160 for b in snap.bus)
    assert "\x1b" not in "".join(plain.render(snap))
    # A hand-written `[lead]` line is shown as such, never as a controller commentary line.
    assert snap.bus[-1].sender == "lead" and snap.bus[-1].ts is None
    assert all("trust me" not in c.text for c in snap.commentary)


def test_report_cost_series_from_jobs(orch_home: Path) -> None:
    watcher = Watcher(lead_run())
    watcher.snapshot()
    assert watcher.state is not None
    series = job_costs(watcher.state, watcher.usage)
    assert [p.usd for p in series[1]] == [0.0, 0.5, 0.5]
    assert [p.usd for p in series[3]] == [0.0, 0.125]


def test_unknown_run_and_no_name(orch_home: Path) -> None:
    result = orch("watch", "nope", "--once")
    assert result.exit_code == 2
    assert (
        result.output.strip().splitlines() == ["orch: error: no run named 'nope' (hint: `orch ls` lists runs)"]
        or result.output.count("\n") == 1
    ), result.output
    assert orch("watch", "bad/name").exit_code == 2
    assert orch("watch").output.strip() == "no runs"  # no terminal: the `orch ls` view
    lead_run()
    listing = orch("watch").output.splitlines()
    assert listing[0].split() == ["NAME", "STATUS", "OUTCOME", "ENDED", "COST", "WORKERS", "BACKEND", "CONTAINER"]
    assert listing[1].split()[:2] == ["lr", "running"]
    assert orch("watch", "lr", "--control").exit_code == 2

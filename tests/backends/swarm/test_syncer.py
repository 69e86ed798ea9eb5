"""The run's side against a real collector on loopback: a restore gives the run what the collector has, the run
is pushed home while it runs and whole once it ended, and a run a newer life took over is stopped."""

from __future__ import annotations

import sys
from pathlib import Path

from orch.backends.swarm.collector import State
from orch.backends.swarm.passes import baseline_of
from orch.backends.swarm.syncer import Link, Pusher, load_baseline, restore, run, save_baseline
from orch.run.folder import RunFolder
from tests.backends.swarm.conftest import TOKEN, Served, serve

WRITER = """
import pathlib, sys
root = pathlib.Path(sys.argv[1])
(root / "outbox" / "agent-1").mkdir(parents=True, exist_ok=True)
(root / "outbox" / "agent-1" / "result.md").write_text("the last word\\n")
with (root / "events.jsonl").open("a") as f:
    f.write('{"event": "ended"}\\n')
sys.exit(3)
"""


def test_restore_fills_an_empty_task_and_remembers_what_it_got(collector: Served, tmp_path: Path) -> None:
    (collector.home.run / "controller.json").write_text("{}")
    (collector.home.workspace / "README.md").write_text("the tree\n")
    run_root, workspace = tmp_path / "task" / "run", tmp_path / "task" / "workspace"
    baseline = restore(Link(collector.target, TOKEN, 1), run_root, workspace)
    assert (run_root / "controller.json").read_text() == "{}" and (workspace / "README.md").exists()
    assert baseline == baseline_of(run_root)
    save_baseline(baseline, tmp_path / "sync" / "baseline.json")
    assert load_baseline(tmp_path / "sync" / "baseline.json") == baseline
    # What the restore brought is not sent back; only what changes after.
    (run_root / "events.jsonl").write_text("new\n")
    pusher = Pusher(RunFolder(run_root), Link(collector.target, TOKEN, 1), baseline)
    assert pusher.once() and State.load(collector.home).seq == 1
    assert (collector.home.run / "events.jsonl").read_text() == "new\n"


def test_the_run_is_pushed_home_whole_when_it_ends(collector: Served, tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "run")
    folder.root.mkdir()
    folder.events.write_text('{"event": "started"}\n')
    code = run(folder, Link(collector.target, TOKEN, 1), {}, [sys.executable, "-c", WRITER, str(folder.root)], 0.2)
    assert code == 3
    assert (collector.home.run / "outbox" / "agent-1" / "result.md").read_text() == "the last word\n"
    assert (collector.home.run / "events.jsonl").read_text().endswith('{"event": "ended"}\n')
    assert State.load(collector.home).ended == {"life": 1, "code": 3}


def test_a_run_a_newer_life_took_over_is_stopped(tmp_path: Path, collector: Served) -> None:
    folder = RunFolder(tmp_path / "run")
    folder.root.mkdir()
    collector.stop()
    newer = serve(collector.home, life=2, token="token-of-life-2")
    try:
        waits = "import pathlib, signal, sys; pathlib.Path(sys.argv[1]).touch(); signal.pause()"
        marker = folder.root / "alive"
        code = run(folder, Link(newer.target, TOKEN, 1), {}, [sys.executable, "-c", waits, str(marker)], 0.2)
        assert code != 0 and marker.exists()  # it ran, and was stopped at its first pass
        assert State.load(collector.home).ended is None
    finally:
        newer.stop()

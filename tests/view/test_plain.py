"""`orch watch`'s text (orch/view/plain.py): --once and --json of a run mid-way, and the plain lines that follow
a run until it ends or its folder vanishes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from orch.run.records import RunStatus
from orch.view.snapshot import Snapshot
from orch.waits import wait_until
from tests.helpers import orch
from tests.view.fakerun import hook, lead_run


def test_watch_once_and_json(orch_home: Path) -> None:
    lead_run()
    once = orch("watch", "lr", "--once")
    assert once.exit_code == 0, once.output
    lines = once.output.splitlines()
    assert lines[0].startswith("run lr (local, scripted, running); jobs 2/3; findings 1: 0 confirmed, 0 refuted")
    assert "cost $0.8750 of $5.00 (nothing billed)" in lines[0]  # the gateway says it billed nothing
    assert any(line.startswith("W3") and "busy (Bash)" in line and "pages-F1.v2" in line for line in lines)
    assert "  pages-F1 (W1) pending     W2:CONFIRMED W3:PENDING  paginate skips the first page" in lines
    as_json = orch("watch", "lr", "--json")
    assert as_json.exit_code == 0
    assert Snapshot.model_validate_json(as_json.output).workers[2].job == "pages-F1.v2"


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "from orch.cli.main import main; main()", *args]


def test_plain_lines_follow_the_run_until_it_ends(orch_home: Path) -> None:
    run = lead_run()
    proc = subprocess.Popen(_cli("watch", "lr"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        first = proc.stdout.readline()
        assert first[2] == ":" and " W1 idle" in first  # HH:MM:SS W1 idle
        hook(run, 2, "PreToolUse", tool_name="Grep")
        out = proc.stdout
        wait_until(lambda: "W2 busy (Grep)" in out.readline(), 10, "W2's line")
        info = run.info()
        info.status = RunStatus.STOPPED
        run.write_info(info)
        assert proc.wait(10) == 0
    finally:
        proc.kill()


def test_plain_lines_when_the_folder_vanishes(orch_home: Path) -> None:
    run = lead_run()
    proc = subprocess.Popen(_cli("watch", "lr"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdout.readline()
        shutil.rmtree(run.root)
        assert proc.wait(10) == 2
        assert proc.stderr.read().strip() == f"orch: error: run folder {run.root} vanished while watched"
    finally:
        proc.kill()

"""Progress for long waits: `orch run`'s status bar under its commentary, `orch up`'s workers booting."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from orch.run.folder import RunFolder
from orch.view.statusbar import CLEAR, BuildProgress, RunBar, SetupProgress, StatusBar, bar
from orch.waits import wait_until
from tests.helpers import orch
from tests.view.fakerun import hook, lead_run


def test_lines_go_above_the_bar() -> None:
    out = io.StringIO()
    line = StatusBar(out)
    line.set("jobs 1/2")
    line.echo("12:00:00  W1 assigned t1 (finder)")
    line.set("x" * 500)  # never wider than the terminal: it would wrap and leave its start behind
    line.clear()
    text = out.getvalue()
    assert text.startswith(f"{CLEAR}jobs 1/2{CLEAR}12:00:00  W1 assigned t1 (finder)\njobs 1/2{CLEAR}")
    assert max(len(part) for part in text.split(CLEAR)) < 500
    assert text.endswith(CLEAR)


def test_the_run_bar_follows_the_run(orch_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Wide enough for the whole bar whatever the time left reads ("58m" or "57m59s") and wherever the
    # tests run (no terminal: COLUMNS or the fallback; under pytest-xdist, no terminal at all).
    monkeypatch.setenv("COLUMNS", "200")
    run = lead_run()
    out = io.StringIO()
    run_bar = RunBar(run, out)
    try:
        wait_until(lambda: "jobs 2/3 | findings 1 (0 confirmed, 0 refuted) | $0.8750 of $5.00" in out.getvalue(), 10,
                   "the first bar")  # fmt: skip
        assert "2 idle 1 busy" in out.getvalue()
        hook(run, 1, "PreToolUse", tool_name="Bash")
        wait_until(lambda: out.getvalue().endswith("| 2 busy 1 idle"), 10, "the bar to follow a hook event")
    finally:
        run_bar.close()
    assert out.getvalue().endswith(CLEAR)


def test_up_says_each_worker_booted(tmp_path: Path) -> None:
    result = orch("up", "boot", "-n", "2", "--agent", "scripted", "--workdir", tmp_path, "--local")
    try:
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert {line.split(" (")[0] for line in lines if "booted" in line} == {"worker 1 booted", "worker 2 booted"}
        assert RunFolder.for_name("boot").exists()
    finally:
        assert orch("kill", "boot").exit_code == 0  # its relay, gateway and tmux server outlived the test otherwise


def test_a_build_keeps_its_steps_and_scrolls_their_output() -> None:
    out = io.StringIO()
    build = BuildProgress(out)
    for line in ["Step 1/3 : FROM base", " ---> abc", "Step 2/3 : RUN npm install", "added 1 package", "npm notice"]:
        build.line(line)
    build.close()
    kept = [part.split("\n")[0] for part in out.getvalue().split(CLEAR) if "\n" in part]
    assert kept == ["Step 1/3 : FROM base", "Step 2/3 : RUN npm install"]
    assert f"{CLEAR}  npm notice{CLEAR}" in out.getvalue()


def test_setups_bar_fills_with_the_size_on_disk_and_is_never_full_before_the_end() -> None:
    assert bar(0, 100, width=10) == "[..........]"
    assert bar(50, 100, width=10) == "[#####.....]"
    assert bar(150, 100, width=10) == "[#########.]"  # the pinned size is an estimate
    assert bar(5, 0, width=4) == "[....]"


def test_setup_progress_draws_a_bar_on_a_terminal_and_nothing_in_a_log() -> None:
    sizes = iter([10, 20])
    term = io.StringIO()
    progress = SetupProgress(term, True, lambda: next(sizes), 40)
    progress.tick()
    progress.tick()
    progress.close()
    assert "10 of about 40 MB" in term.getvalue() and "[############" in term.getvalue()
    log = io.StringIO()
    quiet = SetupProgress(log, False, lambda: 1, 40)
    quiet.tick()
    quiet.close()
    assert log.getvalue() == ""  # CI's log gets orch setup's own lines, never a bar's redraws

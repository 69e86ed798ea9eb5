"""The demo, played by orch's scripted agent (the fast tier's `orch demo`): the run and every command after it
agree it went as designed: `orch run`'s banner and exit code, `orch status`, `orch ls`, `orch read` of a stopped
worker, `orch report`, report.junit.xml and report.sarif (tests/lead/leadrun.py: the same checks of the real
Claude Code demo in tests/scenarios/test_claude_lead.py); and a stopped worker's rendered log is what tmux
showed live."""

from __future__ import annotations

from pathlib import Path

import yaml

from orch.fleet import launch
from orch.run.folder import RunFolder
from tests.helpers import demo_spec, orch
from tests.lead.leadrun import DEMO as NAME
from tests.lead.leadrun import assert_the_demo_went_as_designed


def test_the_demo_and_every_command_after_it_agree_it_went_as_designed(tmp_path: Path) -> None:
    """One run for every check (a fixture shared by several tests is made again on each xdist worker). Its fleet
    is kept (teardown off) so that a live worker's screen is read before the run is stopped."""
    spec = demo_spec(tmp_path, "scripted")
    spec.write_text(yaml.safe_dump({**yaml.safe_load(spec.read_text()), "teardown": False}))
    ran = orch("run", spec, "--local", "--name", NAME)
    assert ran.exit_code == 0, ran.output
    run = RunFolder.for_name(NAME)
    live = orch("read", NAME, "2", "--lines", "100000")
    assert live.exit_code == 0, live.output
    assert orch("kill", NAME).exit_code == 0
    _read_renders_a_stopped_workers_terminal_as_it_was(run, live.output)
    assert_the_demo_went_as_designed(run, ran.output)


def _read_renders_a_stopped_workers_terminal_as_it_was(run: RunFolder, live: str) -> None:
    """The stopped worker's log through a terminal emulator gives what tmux showed of the live pane."""
    assert not launch.server_for(run.info()).alive()
    stopped = orch("read", NAME, "2")
    assert stopped.exit_code == 0, stopped.output
    assert stopped.output.rstrip("\n").splitlines() == live.rstrip("\n").splitlines()

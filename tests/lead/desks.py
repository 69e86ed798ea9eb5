"""A controller's parts on a run folder made without starting anything: no tmux server, no agent, no gateway.
What tests/lead/test_dispatch.py and test_acceptance.py drive in process (the loop itself:
tests/scenarios/test_scripted.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orch.jobs.state import ControllerState
from orch.lead.acceptance import Review
from orch.lead.base import Desk
from orch.lead.controller import initial_state
from orch.lead.dispatch import Dispatch
from orch.run.folder import RunFolder
from orch.spec.model import FleetSpec, Limits, TaskSpec
from tests.helpers import run_info


@dataclass
class Parts:
    run: RunFolder
    state: ControllerState
    desk: Desk
    review: Review
    dispatch: Dispatch

    def events(self, name: str) -> list[dict[str, Any]]:
        """The controller's events of this name, in order."""
        lines = (
            [json.loads(line) for line in self.run.events.read_text().splitlines()] if self.run.events.exists() else []
        )
        return [e for e in lines if e["event"] == name]


def parts(tmp_path: Path, workers: int = 3, max_corrections: int = 0, **spec: Any) -> Parts:
    """The run `r` of `workers` scripted workers over tmp_path/work (a.py: one line), with the spec's
    tasks (one by default) as its first jobs."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "a.py").write_text("x = 1\n")
    fleet = FleetSpec(
        **{"tasks": [TaskSpec(goal="g")], "workers": workers, "limits": Limits(max_corrections=max_corrections), **spec}
    )
    run = RunFolder.for_name("r")
    run.create(run_info("r", workers=workers, workdir=str(workdir), writers=bool(fleet.writer_tasks())))
    state = initial_state(run, fleet)
    desk = Desk(run, fleet, state)
    review = Review(desk)
    return Parts(run, state, desk, review, Dispatch(desk, review))

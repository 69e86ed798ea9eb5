"""`orch run SPEC --prepare`, compose's `lead` step that the container's init runs as the run's uid: the run
made, with its spec and controller state, strict (the init gives each worker its uid next), no worker
started; refused outside a container, and over a run that exists."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orch.backends.base import Placement
from orch.backends.swarm.backend import SwarmBackend
from orch.backends.swarm.sandbox import SwarmSandbox
from orch.entry import runner
from orch.jobs.state import load_state
from orch.run.folder import RunFolder
from orch.run.records import Isolation
from orch.spec.load import load_spec
from tests.helpers import orch

pytestmark = pytest.mark.pure


def _spec(tmp_path: Path, **extra: object) -> Path:
    spec = {"workdir": str(tmp_path), "offline": True, "agent": "scripted", "workers": 2, **extra}
    spec["tasks"] = [{"id": "t1", "goal": "Determine whether it works.", "offline_script": [{"reply": "Done."}]}]
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_prepare_makes_the_run_strict_and_starts_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec(tmp_path)
    refused = orch("run", spec, "--name", "ci", "--prepare")
    assert refused.exit_code == 2 and "--prepare is the container init's step" in refused.output
    monkeypatch.setenv("ORCH_IN_CONTAINER", "1")  # this process cannot switch uids: the init will
    result = orch("run", spec, "--name", "ci", "--prepare")
    assert result.exit_code == 0, result.output
    assert "isolation strict" in result.output
    run = RunFolder.for_name("ci")
    info = run.info()
    assert info.isolation is Isolation.STRICT and info.workers == 2
    assert run.fleet_spec.is_file() and load_state(run).outcome is None
    assert all(run.outbox(n).is_dir() for n in (1, 2))
    # No tmux server, gateway or worker: the `pure` marker's fixture fails a test that starts any process.
    assert not run.hook_events(1)
    again = orch("run", spec, "--name", "ci", "--prepare")
    assert again.exit_code == 2 and "already exists" in again.output
    # A spec that asks for shared isolation is made shared (serve-run then keeps no capability).
    shared = orch("run", _spec(tmp_path, verification={"isolation": "shared"}), "--name", "sh", "--prepare")
    assert shared.exit_code == 0 and RunFolder.for_name("sh").info().isolation is Isolation.SHARED


def test_the_command_line_places_a_run_over_its_spec(tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path, placement={"constraints": ["node.labels.zone==eu"], "per_node": 4}))
    assert runner.placed(spec) == Placement(("node.labels.zone==eu",), 4)
    # --constraint adds (a repeat once), --per-node wins
    flags = Placement(("node.role==worker", "node.labels.zone==eu"), 2)
    assert runner.placed(spec, flags) == Placement(("node.labels.zone==eu", "node.role==worker"), 2)
    assert runner.placed(spec, Placement(("node.role==worker",))).per_node == 4
    box = runner.sandbox(spec, SwarmBackend(), placement=flags)
    assert isinstance(box, SwarmSandbox) and box.settings.drive  # made, nothing asked of an engine
    assert box.settings.constraints == ["node.labels.zone==eu", "node.role==worker"] and box.settings.per_node == 2

"""`--backend swarm` from the command line, on a real swarm of three engines (tests/swarmtest.py): `orch demo`
placed by a constraint comes out as designed and its teardown leaves nothing on any node; a fleet from `orch up`
answers `orch ls`, `status`, `pull` and `kill`, and what needs its workers' screens is refused in one line that
names its node."""

from __future__ import annotations

from pathlib import Path

import pytest

from orch.backends.swarm.record import SwarmRunInfo
from orch.run.folder import RunFolder
from orch.run.records import RunStatus
from tests.dockertest import unique
from tests.helpers import orch
from tests.swarmtest import Cluster

pytestmark = [pytest.mark.swarm, pytest.mark.timeout(900)]


def test_orch_demo_on_the_swarm_placed_by_a_constraint_leaves_nothing(
    manager: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCH_IMAGE", manager.image)
    name = unique("sw-cli-demo")
    try:
        result = orch("demo", "--backend", "swarm", "--name", name, "--constraint", "node.labels.orch.node==w1")
        assert result.exit_code == 0, result.output
        assert "the real defect was CONFIRMED by both other workers" in result.output
        assert " assigned pages (finder)" in result.output  # the commentary, read from the folder as it came home
        info = RunFolder.for_name(name).info()
        assert isinstance(info, SwarmRunInfo) and [life.node for life in info.swarm.lives] == ["orch-sw-w1"]
        assert info.swarm.constraints == ["node.labels.orch.node==w1"] and info.swarm.drive
        # The spec's teardown removed the run's objects on every node; its folder stays, whole, here.
        assert manager.leftovers(name) == [] and RunFolder.for_name(name).report_json.is_file()
        listed = orch("ls")
        row = next(line for line in listed.output.splitlines() if line.startswith(f"{name} "))
        assert " passed (exit 0) " in row and " swarm " in row and row.endswith(" exit 0 on orch-sw-w1"), listed.output
    finally:
        orch("kill", name)
    assert manager.leftovers(name) == []


def test_a_fleet_from_orch_up_answers_the_run_commands(
    manager: Cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ORCH_IMAGE", manager.image)
    name = unique("sw-cli-up")
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "README.md").write_text("a project\n")
    placed = ["--constraint", "node.role==worker", "--per-node", "4"]
    try:
        up = orch("up", name, "--backend", "swarm", "-n", "2", "--agent", "scripted", "--offline", "-w", workdir,
                  "--egress", "none", *placed)  # fmt: skip
        assert up.exit_code == 0, up.output
        info = RunFolder.for_name(name).info()
        assert isinstance(info, SwarmRunInfo) and info.status is RunStatus.RUNNING and info.swarm.per_node == 4
        node = info.swarm.lives[0].node
        assert node in ("orch-sw-w1", "orch-sw-w2") and f"up (swarm node {node})" in up.output
        status = orch("status", name)
        assert status.exit_code == 0 and f"run {name} (swarm, scripted, running, alive)" in status.output
        assert f"{name} " in orch("ls").output and f"running on {node}" in orch("ls").output
        assert orch("pull", name).output.strip() == f"pulled {name} into {RunFolder.for_name(name).root}"
        again = orch("up", name, "--resume")
        assert again.exit_code == 2 and f"run {name!r} is still running" in again.output
        send = orch("send", name, "1", "hi")
        assert send.exit_code != 0 and f"runs on swarm node {node}: `orch send` needs its workers' screens" in (
            send.output
        )
        assert len(send.output.strip().splitlines()) == 1
        killed = orch("kill", name)
        assert killed.exit_code == 0 and f"killed {name}" in killed.output
        assert RunFolder.for_name(name).info().status is RunStatus.STOPPED and manager.leftovers(name) == []
    finally:
        orch("kill", name)

"""A swarm run whose node dies: the loss is marked with the node's name and why, `--resume` continues on the
other node from the last pass home, and nothing that came home before is lost: the run ends as it would have."""

from __future__ import annotations

import contextlib

import docker
import pytest
from docker.models.containers import Container

from orch.backends.swarm.record import SwarmRunInfo
from orch.contracts import OrchCommand
from orch.entry.demo import EXPECTED
from orch.run.records import RunStatus
from orch.waits import wait_until
from tests.dockertest import unique
from tests.swarmtest import Cluster, demo_run, findings

pytestmark = [pytest.mark.swarm, pytest.mark.timeout(900)]


def test_a_cut_node_is_marked_and_the_run_resumes_on_the_other_losing_nothing(manager: Cluster) -> None:
    name = unique("sw-cut")
    box, run = demo_run(name, manager.image, ["node.role==worker"])
    node = ""
    frozen: list[Container] = []
    try:
        info = box.start(box.pull_info(_swarm(run.info())))
        node = info.swarm.lives[0].node.removeprefix("orch-sw-")

        def a_finding_home() -> list[str]:
            box.pull_info(_swarm(run.info()))
            return sorted(p.name for p in run.findings_dir.glob("*.json"))

        home = wait_until(a_finding_home, 300, "a finding to come home before the node dies", interval=1.0)
        # The demo can end within the seconds the swarm takes to see a heartbeat missed, and a run that ended
        # before its node went is rightly not lost: its task is frozen first, so the node dies mid-run.
        frozen = _containers(manager, node, name)
        assert frozen, f"no container of run {name} on node {node}"
        for container in frozen:
            container.pause()
        manager.cut(node)
        info = box._until_ended(_swarm(run.info()), 120)
        assert info.status is RunStatus.FAILED
        assert info.swarm.lost == f"node orch-sw-{node} is down: heartbeat failure" == info.swarm.lives[0].ended
        assert set(home) <= {p.name for p in run.findings_dir.glob("*.json")}  # the loss took none back

        info = _swarm(box.resume(name))
        assert [life.node for life in info.swarm.lives][1:] != [f"orch-sw-{node}"]
        args = ["run", "--resume", name, "--no-result", "--no-commentary"]
        code = box.forward(info, OrchCommand(args, lambda: 0))
        assert code == 0 and findings(run) == EXPECTED  # as an uninterrupted run ends: as designed
        assert _swarm(run.info()).swarm.lives[1].ended == "exit 0"
    finally:
        for container in frozen:
            with contextlib.suppress(docker.errors.APIError):
                container.unpause()  # an engine refuses to remove a paused container
        if node:
            manager.heal(node)
        box.kill(run.info())
    # The cut node learns its task went once it is back, and removes it with its volumes.
    wait_until(lambda: not manager.leftovers(name), 180, f"what run {name} left on node {node} to go")


def _swarm(info: object) -> SwarmRunInfo:
    assert isinstance(info, SwarmRunInfo)
    return info


def _containers(cluster: Cluster, node: str, name: str) -> list[Container]:
    return cluster.engine(node).containers.list(filters={"label": f"orch.run={name}"})

"""A swarm run whose node dies: the loss is marked with the node's name and why, `orch run --resume NAME`
continues on the other node from the last pass home, and nothing that came home before is lost: the run ends as
it would have."""

from __future__ import annotations

import pytest
from docker.models.containers import Container

from orch.backends.swarm.record import SwarmRunInfo
from orch.entry.demo import EXPECTED
from orch.report.summary import RunSummary
from orch.run.events import Event
from orch.run.records import RunStatus
from orch.waits import wait_until
from tests.dockertest import unique
from tests.helpers import orch
from tests.lead.leadrun import events
from tests.swarmtest import Cluster, demo_run, findings

pytestmark = [pytest.mark.swarm, pytest.mark.timeout(900)]


def test_a_cut_node_is_marked_and_the_run_resumes_on_the_other_losing_nothing(manager: Cluster) -> None:
    name = unique("sw-cut")
    box, run = demo_run(name, manager.image, ["node.role==worker"])
    node = ""
    try:
        info = box.start(box.pull_info(_swarm(run.info())))
        node = info.swarm.lives[0].node.removeprefix("orch-sw-")
        # The demo can end within the seconds the swarm takes to miss a heartbeat, and a run that ended before its
        # node went is rightly not lost. So its controller is stopped (SIGSTOP) once both finders are briefed:
        # they still report, their outboxes still come home, but nothing is verified and the run cannot end.
        task = wait_until(lambda: _task(manager, node, name), 300, f"run {name}'s task to run on node {node}")
        wait_until(lambda: _assigned(task, name) >= 2, 300, "both finders to be briefed", interval=0.2)
        assert _sh(task, STOP_CONTROLLER.format(name=name)), "no controller to stop"

        def findings_home() -> list[str]:
            box.pull_info(_swarm(run.info()))
            return sorted(str(p.relative_to(run.root)) for p in run.root.glob("outbox/agent-*/*.findings.json"))

        def both_home() -> list[str] | None:
            found = findings_home()
            return found if len(found) == 2 else None

        home = wait_until(both_home, 300, "both findings to come home")
        manager.cut(node)
        info = box._until_ended(_swarm(run.info()), 120)
        assert info.status is RunStatus.FAILED
        assert info.swarm.lost == f"node orch-sw-{node} is down: heartbeat failure" == info.swarm.lives[0].ended
        assert set(home) <= set(findings_home())  # the loss took none back

        # `orch run --resume NAME`, as a user types it: the lost life's run is relaunched on a ready node, from
        # its last pass home, and followed to its end.
        result = orch("run", "--resume", name, "--json")
        assert result.exit_code == 0, result.output
        assert RunSummary.model_validate_json(result.stdout.strip().splitlines()[-1]).status == "passed"
        info = _swarm(run.info())
        assert [life.node for life in info.swarm.lives][1:] != [f"orch-sw-{node}"]
        assert findings(run) == EXPECTED  # as an uninterrupted run ends: as designed
        assert info.swarm.lives[1].ended == "exit 0"
        said = [e.event for e in events(run)]  # this side's own lines came home with the task's
        assert Event.FLEET_RELAUNCHING in said
    finally:
        if node:
            manager.heal(node)
        box.kill(run.info())
    # The cut node learns its task went once it is back, and removes it with its volumes.
    wait_until(lambda: not manager.leftovers(name), 180, f"what run {name} left on node {node} to go")


def _swarm(info: object) -> SwarmRunInfo:
    assert isinstance(info, SwarmRunInfo)
    return info


STOP_CONTROLLER = (
    "for d in /proc/[0-9]*; do tr '\\0' ' ' < $d/cmdline 2>/dev/null | grep -q '[r]un --resume {name} *$' "
    "&& kill -STOP ${{d#/proc/}} && echo ${{d#/proc/}}; done; true"
)
"""SIGSTOP to the task's controller (`orch run --resume NAME`, which serve-run --drive starts): it prints its pid."""


def _task(cluster: Cluster, node: str, name: str) -> Container | None:
    running = cluster.engine(node).containers.list(filters={"label": f"orch.run={name}"})
    return running[0] if running else None


def _assigned(task: Container, name: str) -> int:
    """How many jobs the task's controller has handed out so far (its events.jsonl, read in the task)."""
    said = _sh(task, f'grep -c \'"event":"assigned"\' /orch/runs/{name}/events.jsonl')
    return int(said) if said.isdigit() else 0


def _sh(task: Container, script: str) -> str:
    """What `script` printed, run as root in the task's container."""
    done = task.exec_run(["sh", "-c", script], user="0")
    assert isinstance(done.output, bytes)
    return done.output.decode(errors="replace").strip()

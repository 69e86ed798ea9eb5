"""What `orch doctor` says of the swarm behind DOCKER_HOST: whether that engine is a manager, how many nodes
are ready to take a run, how soon a dead node is noticed, and what Swarm cannot enforce on a run's task
(and what orch does instead)."""

from __future__ import annotations

from typing import Any

import docker

from orch.backends.swarm.service import ready_nodes, swarm_api
from orch.contracts import Check

GAPS = (
    "no-new-privileges (the task's init sets it itself before anything else)",
    "a seccomp profile of orch's choosing (the engine's default profile applies)",
    "a swap limit (a node with swap lets a run swap; the watchdog still caps each worker's memory)",
    "exec on tmpfs (/tmp and home are noexec in a task)",
)
"""What a Swarm service of Docker 20.10 (API 1.41) cannot be given that a run's container gets."""
HEARTBEATS_TO_DOWN = 3
"""Heartbeats a node may miss before the manager marks it down (swarmkit's grace)."""


def doctor_checks(client: docker.DockerClient, address: str) -> list[Check]:
    """The swarm lines of `orch doctor` (all optional: only `--backend swarm` needs a swarm)."""
    state: dict[str, Any] = client.info().get("Swarm") or {}
    if state.get("LocalNodeState") != "active":
        fix = "docker swarm init (or point DOCKER_HOST at a manager) to run fleets with --backend swarm"
        return [Check("swarm", False, f"the engine at {address} is in no swarm", fix, optional=True)]
    if not state.get("ControlAvailable"):
        fix = "point DOCKER_HOST at a manager of this swarm (`docker node ls` works there)"
        return [Check("swarm", False, f"the engine at {address} is a worker, not a manager", fix, optional=True)]
    nodes = swarm_api(client).nodes()
    ready = ready_nodes(client)
    names = ", ".join(sorted(str(n["Description"]["Hostname"]) for n in ready))
    period = (client.swarm.attrs.get("Spec") or {}).get("Dispatcher", {}).get("HeartbeatPeriod", 5_000_000_000)
    notice = HEARTBEATS_TO_DOWN * period / 1e9
    return [
        Check(
            "swarm", True, f"manager at {address}: {len(ready)} of {len(nodes)} nodes ready ({names})", optional=True
        ),
        Check(
            "swarm nodes",
            bool(ready),
            f"a node that dies is marked down after about {notice:g}s (heartbeat {period / 1e9:g}s)",
            None
            if ready
            else "docker swarm join a node, or make one available: docker node update --availability active",
            optional=True,
        ),
        Check("swarm gaps", True, "Swarm cannot set on a run's task: " + "; ".join(GAPS), optional=True),
    ]

"""`orch doctor`'s swarm lines on the real cluster: a manager and its ready nodes, a worker's engine (not a
manager), and what Swarm cannot set on a run's task."""

from __future__ import annotations

import pytest

from orch.backends.swarm.cluster import doctor_checks
from tests.swarmtest import Cluster

pytestmark = [pytest.mark.swarm, pytest.mark.timeout(600)]


def test_doctor_says_manager_nodes_and_gaps(cluster: Cluster) -> None:
    swarm, nodes, gaps = doctor_checks(cluster.engine("mgr"), cluster.manager)
    assert swarm.ok and "3 of 3 nodes ready (orch-sw-mgr, orch-sw-w1, orch-sw-w2)" in swarm.detail
    assert nodes.ok and "marked down after about 3s (heartbeat 1s)" in nodes.detail
    assert gaps.ok and "no-new-privileges (the task's init sets it itself" in gaps.detail
    (worker,) = doctor_checks(cluster.engine("w1"), cluster.address("w1"))
    assert not worker.ok and worker.optional and "a worker, not a manager" in worker.detail and worker.fix

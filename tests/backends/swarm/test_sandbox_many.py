"""Many swarm runs at once: eight fleets started side by side spread over the two workers by Swarm, at most the
per-node cap on each, each with its node on its record; all of it gone after."""

from __future__ import annotations

import collections
import concurrent.futures
from pathlib import Path

import pytest

from orch.backends.swarm.backend import SwarmSettings
from orch.backends.swarm.record import SwarmRunInfo
from orch.backends.swarm.sandbox import SwarmSandbox
from orch.contracts import UpRequest
from orch.run.folder import RunFolder
from orch.run.records import ContainerOptions, EgressMode, Isolation, RunStatus
from tests.dockertest import unique
from tests.swarmtest import Cluster

pytestmark = [pytest.mark.swarm, pytest.mark.timeout(900)]


def test_eight_runs_spread_over_two_nodes_and_leave_nothing(manager: Cluster, tmp_path: Path) -> None:
    names = [unique(f"sw-many{n}") for n in range(8)]
    requests = []
    for name in names:  # one spec over eight workdirs
        workdir = tmp_path / name
        workdir.mkdir()
        (workdir / "README.md").write_text(f"repository {name}\n")
        requests.append(UpRequest(name, 1, "scripted", workdir, "default", offline=True, isolation=Isolation.STRICT))
    options = ContainerOptions(egress=EgressMode.NONE)
    box = SwarmSandbox(
        SwarmSettings(
            image=manager.image, options=options, boot_timeout=120, constraints=["node.role==worker"], per_node=4
        )
    )
    started = box.up_many(requests)
    try:
        infos = [info for info in started if isinstance(info, SwarmRunInfo)]
        assert len(infos) == 8, [str(failed) for failed in started if not isinstance(failed, SwarmRunInfo)]
        assert all(info.status is RunStatus.RUNNING for info in infos)
        nodes = collections.Counter(info.swarm.lives[0].node for info in infos)
        assert nodes == {"orch-sw-w1": 4, "orch-sw-w2": 4}
        for name in names:  # each run's record says where it runs, as `orch ls` shows it
            assert box.state(RunFolder.for_name(name).info()).startswith("running on orch-sw-w")
    finally:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda name: SwarmSandbox().kill(RunFolder.for_name(name).info()), names))
    assert [thing for name in names for thing in manager.leftovers(name)] == []

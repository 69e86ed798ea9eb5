"""A swarm run's objects through the manager, on the real cluster: a node that cannot run the run's image
refuses its task, which `orch` says in one line naming the node and the fix, leaving nothing behind."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from orch.backends.swarm.backend import SwarmSettings
from orch.backends.swarm.sandbox import SwarmSandbox
from orch.contracts import UpRequest
from orch.errors import DeliveryError
from orch.run.folder import RunFolder
from orch.run.records import ContainerOptions, EgressMode, Isolation
from tests.dockertest import unique
from tests.helpers import orch
from tests.swarmtest import Cluster

pytestmark = [pytest.mark.swarm, pytest.mark.timeout(600)]


def test_a_node_without_the_image_is_named_with_the_fix(manager: Cluster, tmp_path: Path) -> None:
    engine = manager.engine("mgr")  # an image the manager has and its workers do not
    dockerfile = f"FROM {manager.image}\nLABEL orch.test=only-on-the-manager\n".encode()
    tag = f"{unique('orch-mgr-only')}:test"
    engine.images.build(fileobj=io.BytesIO(dockerfile), tag=tag, rm=True)
    workdir = tmp_path / "work"
    workdir.mkdir()
    name = unique("sw-noimage")
    settings = SwarmSettings(
        image=tag,
        options=ContainerOptions(egress=EgressMode.NONE),
        boot_timeout=60,
        constraints=["node.labels.orch.node==w1"],
    )
    request = UpRequest(name, 1, "scripted", workdir, "default", offline=True, isolation=Isolation.STRICT)
    try:
        with pytest.raises(DeliveryError, match="node orch-sw-w1 rejected the task: No such image") as refused:
            SwarmSandbox(settings).up(request)
        assert "load the image there" in refused.value.one_line() and "\n" not in refused.value.one_line()
        assert not RunFolder.for_name(name).root.exists() and manager.leftovers(name) == []
    finally:
        engine.images.remove(tag, force=True)


def test_a_network_the_swarm_lacks_is_refused_before_anything_is_made(
    manager: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCH_IMAGE", manager.image)
    name = unique("sw-nonet")
    result = orch("up", name, "--backend", "swarm", "--agent", "scripted", "--workdir", tmp_path, "--network", name)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"orch: error: --network {name}: no swarm network of that name on the manager (hint: docker network create "
        f"--driver overlay {name} (on a manager), then --network {name})"
    ]
    assert not RunFolder.for_name(name).root.exists() and manager.leftovers(name) == []

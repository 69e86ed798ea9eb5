"""A new run's container claims its worker uid range through the engine (orch.backends.docker.boot.create_on_a_range):
another `orch up` at the same instant whose name hashes to the same range, made between this one's look at the
engine and its container, keeps the range, and this one moves to another."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import docker
import pytest
from docker.models.containers import Container

from orch.backends.docker import boot
from orch.container.layout import ROLE_CONTAINER, labels
from orch.run.records import ContainerInfo, DockerRunInfo
from orch.settings import user
from tests.dockertest import BASE, unique
from tests.helpers import run_info

pytestmark = pytest.mark.docker


@pytest.fixture
def made(engine: docker.DockerClient) -> Iterator[list[Container]]:
    made: list[Container] = []
    yield made
    for container in made:
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True)


def _container(engine: docker.DockerClient, name: str, base: int) -> Container:
    """A container as `orch up` leaves one (orch's labels, its range in its environment), never started."""
    env = {user.WORKER_UID_BASE.name: str(base)}
    return engine.containers.create(
        BASE, command=["true"], name=name, labels=labels(name, ROLE_CONTAINER), environment=env
    )


def test_two_ups_at_one_instant_on_one_range_end_on_two(
    engine: docker.DockerClient, made: list[Container], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(user.WORKER_UID_BASE.name, raising=False)
    name = unique("claim")
    info = run_info(name, container=ContainerInfo(name=f"orch-{name}", image=BASE, host_run_dir="/x", user="1000:1000"))
    assert isinstance(info, DockerRunInfo)
    wanted = boot.worker_uid_base(engine, name, boot.taken_uid_bases(engine), 1000)

    def create() -> Container:
        base = info.container.options.worker_uid_base
        assert base is not None
        if not made:  # the other up: it looked at the engine as this one did, and made its container first
            made.append(_container(engine, f"orch-{name}-rival", base))
        made.append(_container(engine, f"orch-{name}-{len(made)}", base))
        return made[-1]

    container = boot.create_on_a_range(engine, info, create)
    rival, lost = made[0], made[1]
    assert info.container.options.worker_uid_base not in (None, wanted)  # moved to another range
    assert boot.env_uid_base(container.attrs["Config"]["Env"]) == info.container.options.worker_uid_base
    assert boot.env_uid_base(rival.attrs["Config"]["Env"]) == wanted  # the first one keeps it
    with pytest.raises(docker.errors.NotFound):
        engine.containers.get(str(lost.id))  # the one made on the same range after it is gone

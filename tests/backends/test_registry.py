"""Which sandbox a run gets, seen from the host and from inside its container (no engine needed)."""

from __future__ import annotations

import pytest

from orch.backends import registry as backends
from orch.backends.docker.sandbox import DockerSandbox
from orch.backends.local.sandbox import LocalSandbox
from orch.contracts import OrchCommand
from orch.run.records import ContainerInfo, RunInfo
from tests.helpers import run_info

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

LOCAL = run_info("l")
DOCKER = run_info("d", container=ContainerInfo(name="orch-d", image="i", host_run_dir="/x"))
FAR = run_info("f", container=ContainerInfo(name="orch-f", image="i", host_run_dir="v", on_remote_engine=True))

CASES = [
    # run, in its container?, sandbox, folder here?
    (LOCAL, False, LocalSandbox, True),
    (DOCKER, False, DockerSandbox, True),
    (FAR, False, DockerSandbox, False),
    (DOCKER, True, LocalSandbox, True),
    (FAR, True, LocalSandbox, True),  # inside, the remote engine's volume is the mounted folder
]


@pytest.mark.parametrize(
    ("info", "inside", "sandbox", "folder_here"),
    CASES,
    ids=["local", "docker-host", "remote-engine-host", "docker-inside", "remote-engine-inside"],
)
def test_sandbox_and_folder_of_a_run(
    info: RunInfo, inside: bool, sandbox: type, folder_here: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCH_IN_CONTAINER", "1" if inside else "")
    assert type(backends.sandbox_for(info)) is sandbox
    assert backends.folder_is_here(info) is folder_here


def test_local_commands_run_in_this_process() -> None:
    done: list[str] = []
    command = OrchCommand(["bus", "post", "l", "x"], lambda: done.append("here"))
    assert LocalSandbox().forward(LOCAL, command) == 0
    assert backends.at_folder(DOCKER, OrchCommand(["wait", "d"], lambda: 3)) == 3  # a bind-mounted folder
    assert done == ["here"]
    assert LocalSandbox().pull(LOCAL) is False and LocalSandbox().state(LOCAL) == "-"


def test_the_boot_timeout_reaches_either_sandbox() -> None:
    local = backends.sandbox_for(LOCAL, boot_timeout=7)
    docker = backends.sandbox_for(DOCKER, boot_timeout=7)
    assert isinstance(local, LocalSandbox) and local.boot_timeout == 7
    assert isinstance(docker, DockerSandbox) and docker.boot_timeout == 7

"""The docker backend's answers: its settings from the command line, its sandbox from the host and from inside a
run's container, where a run's folder is, and its facts (no engine needed)."""

from __future__ import annotations

import pytest

from orch.backends.base import ChecksSandbox, UpOptions
from orch.backends.docker.backend import DockerBackend, DockerSettings
from orch.backends.docker.sandbox import DockerSandbox
from orch.backends.local.sandbox import LocalSandbox
from orch.errors import UsageError
from orch.run.records import ContainerInfo, EgressMode, Isolation
from tests.helpers import run_info

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

BACKEND = DockerBackend()


def test_its_settings_are_the_container_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_IMAGE", "orch-test:1")
    settings = BACKEND.settings(UpOptions(boot_timeout=9, copy=True, allow=("10.0.0.1",), cpus=1.5, pids=64))
    assert isinstance(settings, DockerSettings) and settings.image == "orch-test:1" and settings.boot_timeout == 9
    opts = settings.options
    assert opts.copy_workdir and opts.egress is EgressMode.ALLOWLIST and opts.allow == ["10.0.0.1"]
    assert (opts.cpus, opts.pids) == (1.5, 64)
    assert BACKEND.settings(UpOptions(image="mine:2", egress=EgressMode.NONE)).image == "mine:2"
    for bad in (UpOptions(cpus=0), UpOptions(pids=8)):
        with pytest.raises(UsageError, match="--cpus must be positive and --pids at least 16"):
            BACKEND.settings(bad)
    assert BACKEND.settings(UpOptions(network="mine")).options.network == "mine"


@pytest.mark.parametrize("network", ["host", "container:abc123"])
def test_a_namespace_not_its_own_is_refused(network: str) -> None:
    """The container's init sets its firewall in the namespace it is in: the host's, or another container's."""
    with pytest.raises(UsageError, match=f"--network {network}: a run's container keeps a network namespace"):
        BACKEND.settings(UpOptions(network=network))


def test_its_sandbox_is_the_container_s_from_the_host_and_local_inside(monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox = BACKEND.sandbox(BACKEND.settings(UpOptions(boot_timeout=7)))
    assert isinstance(sandbox, DockerSandbox) and sandbox.boot_timeout == 7
    now = BACKEND.sandbox(BACKEND.settings(UpOptions(boot_timeout=0)))  # no wait at all: not the default
    assert isinstance(now, DockerSandbox) and now.boot_timeout == 0
    monkeypatch.setenv("ORCH_IN_CONTAINER", "1")
    inside = BACKEND.sandbox(BACKEND.settings(UpOptions(boot_timeout=7)))
    assert isinstance(inside, LocalSandbox) and inside.boot_timeout == 7


def test_a_remote_engine_s_run_folder_is_a_copy_here(monkeypatch: pytest.MonkeyPatch) -> None:
    near = run_info("d", container=ContainerInfo(name="orch-d", image="i", host_run_dir="/x"))
    far = run_info("f", container=ContainerInfo(name="orch-f", image="i", host_run_dir="v", on_remote_engine=True))
    assert BACKEND.folder_is_here(near) and not BACKEND.folder_is_here(far)
    monkeypatch.setenv("ORCH_IN_CONTAINER", "1")  # inside, the remote engine's volume is the mounted folder
    assert BACKEND.folder_is_here(far)


def test_its_facts() -> None:
    assert BACKEND.pinned_agents and not BACKEND.checks_at_start and BACKEND.container
    assert BACKEND.gateway_keeper and ChecksSandbox.OWN_UID in BACKEND.checks and BACKEND.strict_possible()
    assert BACKEND.default_isolation(["claude"]) == (Isolation.STRICT, None)
    assert "container" in BACKEND.shared_note()

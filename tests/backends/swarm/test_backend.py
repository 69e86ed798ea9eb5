"""The swarm backend's answers (no engine needed): its settings from the command line, placement refused in one
line where it is bad and by the backends with no nodes, its sandbox, where a run's folder is, and its facts."""

from __future__ import annotations

from pathlib import Path

import pytest

from orch.backends.base import ChecksSandbox, Placement, UpOptions
from orch.backends.docker.backend import DockerBackend
from orch.backends.local.backend import LocalBackend
from orch.backends.swarm.backend import SwarmBackend, SwarmSettings
from orch.backends.swarm.record import SwarmInfo, SwarmRunInfo
from orch.backends.swarm.sandbox import SwarmSandbox
from orch.contracts import UpRequest
from orch.errors import UsageError
from orch.run.records import ContainerOptions, EgressMode, Isolation
from tests.helpers import run_info

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

BACKEND = SwarmBackend()


def _placed(constraints: list[str], per_node: int | None = None) -> UpOptions:
    return UpOptions(placement=Placement(tuple(constraints), per_node))


def test_its_settings_place_the_run_and_confine_its_task(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_IMAGE", "registry.example:5000/orch:1")
    placement = Placement(("node.labels.zone==eu", "node.role != manager"), per_node=4)
    options = UpOptions(boot_timeout=9, placement=placement)
    settings = BACKEND.settings(options)
    assert isinstance(settings, SwarmSettings) and settings.image == "registry.example:5000/orch:1"
    assert settings.constraints == ["node.labels.zone==eu", "node.role != manager"] and settings.per_node == 4
    assert settings.boot_timeout == 9 and not settings.drive and BACKEND.settings(UpOptions(lead=True)).drive
    opts = settings.options
    assert opts.copy_workdir and opts.egress is EgressMode.ALLOWLIST and opts.cpus == 2.0  # not this machine's
    assert BACKEND.settings(UpOptions(image="mine:2", egress=EgressMode.NONE)).options.egress is EgressMode.NONE
    # `--network`: an overlay network its task joins besides the run's own; `--copy` is what it always does
    assert BACKEND.settings(UpOptions(network="shared-overlay", copy=True)).options.network == "shared-overlay"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            UpOptions(placement=Placement(constraints=("zone=eu",))),
            "--constraint 'zone=eu': expected KEY==VALUE or KEY!=VALUE",
        ),
        (
            UpOptions(placement=Placement(constraints=("node.role==",))),
            "--constraint 'node.role==': expected KEY==VALUE",
        ),
        (UpOptions(placement=Placement(per_node=0)), "--per-node 0: give at least 1"),
        (UpOptions(cpus=0), "--cpus must be positive"),
        (UpOptions(network="host"), "--network host: a swarm run's task joins an overlay network besides its own"),
    ],
)
def test_bad_placement_is_one_line(options: UpOptions, message: str) -> None:
    with pytest.raises(UsageError, match=message) as caught:
        BACKEND.settings(options)
    assert "\n" not in caught.value.one_line()


@pytest.mark.parametrize("other", [LocalBackend(), DockerBackend()])
def test_a_backend_with_no_nodes_refuses_placement(other: LocalBackend | DockerBackend) -> None:
    for options in (
        UpOptions(placement=Placement(constraints=("node.role==worker",))),
        UpOptions(placement=Placement(per_node=2)),
    ):
        with pytest.raises(UsageError, match=f"place a run on a swarm's nodes; {other.title} has none") as caught:
            other.settings(options)
        assert caught.value.hint == "use --backend swarm, or drop them"


def test_its_sandbox_its_folder_and_its_facts() -> None:
    sandbox = BACKEND.sandbox(BACKEND.settings(UpOptions(boot_timeout=0)))
    assert isinstance(sandbox, SwarmSandbox) and sandbox.boot_timeout == 0  # no wait at all: not the default
    with pytest.raises(TypeError, match="takes SwarmSettings"):
        BACKEND.sandbox(LocalBackend().settings(UpOptions()))
    info = SwarmRunInfo.of(run_info("s"), swarm=SwarmInfo(image="i"))
    assert not BACKEND.folder_is_here(info)  # a copy, pulled from its collector
    assert BACKEND.pinned_agents and not BACKEND.checks_at_start and BACKEND.container
    assert BACKEND.lingers and BACKEND.comes_home  # its collector, secrets and network; its passes
    assert BACKEND.gateway_keeper and ChecksSandbox.OWN_UID in BACKEND.checks and BACKEND.strict_possible()
    assert BACKEND.default_isolation(["claude"]) == (Isolation.STRICT, None)
    assert not LocalBackend.lingers and not DockerBackend.lingers


def test_its_sandbox_refuses_open_egress_to_a_strict_run_with_checks_before_asking_the_manager(
    tmp_path: Path,
) -> None:
    """Pure: the refusal comes before any engine is asked (none is here)."""
    box = SwarmSandbox(SwarmSettings(options=ContainerOptions(egress=EgressMode.OPEN)))
    request = UpRequest(name="sw", workers=1, agent="scripted", workdir=tmp_path, isolation=Isolation.STRICT,
                        writers=True, checks=True)  # fmt: skip
    with pytest.raises(UsageError, match=r"does not cut the checks' uid off the network \(egress open\?\)"):
        box.check(request)

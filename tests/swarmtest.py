"""The swarm tests' cluster: three Docker engines on this machine, each in a network namespace of its own,
joined as a swarm (scripts/swarm-cluster.sh: a manager, workers w1 and w2, on veth links a test can cut).

All their traffic stays between the namespaces the script made. The cluster's manager is what DOCKER_HOST
names in a test (`manager`), as a user with a remote manager works. A machine without root, network
namespaces or VXLAN skips these tests with the script's one-line reason.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from orch.backends.docker.image import build_image, image_is_current
from orch.backends.swarm import service
from orch.backends.swarm.backend import SwarmSettings
from orch.backends.swarm.sandbox import SwarmSandbox
from orch.entry import demo
from orch.entry.runner import up_request
from orch.errors import SandboxError, UsageError
from orch.jobs.state import FindingStatus, save_state
from orch.lead.controller import initial_state, write_spec
from orch.report.model import load_report
from orch.run.folder import RunFolder
from orch.run.records import ContainerOptions, EgressMode
from orch.versions import CLAUDE_CODE_VERSION
from tests.dockertest import BASE, CA_BUNDLE, IMAGE

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "swarm-cluster.sh"
NODES = ("mgr", "w1", "w2")
SWARM_AGENTS = ("claude",)
"""The swarm tests' image carries the image's own agent only (and the scripted one): a third of the worker
image, loaded into three engines."""


def swarm_image() -> str:
    """The swarm tests' image tag, beside ORCH_IMAGE's (a developer's own tag stays apart from CI's)."""
    repo, sep, tag = IMAGE.rpartition(":")
    return f"{repo}-swarm:{tag}" if sep and "/" not in tag else f"{IMAGE}-swarm"


@dataclass(frozen=True)
class Cluster:
    image: str

    @property
    def manager(self) -> str:
        return self.address("mgr")

    @staticmethod
    def address(node: str) -> str:
        return f"unix:///run/orch-sw/{node}/docker.sock"

    def engine(self, node: str) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.address(node))

    def cut(self, node: str) -> None:
        _script("cut", node)

    def heal(self, node: str) -> None:
        _script("heal", node)

    def leftovers(self, name: str) -> list[str]:
        """Everything of run `name` still on the cluster, on any node (nothing: [])."""
        found = []
        manager = self.engine("mgr")
        filters: dict[str, str | list[str] | bool] = {"label": f"orch.run={name}"}
        found += [f"service {s['Spec']['Name']}" for s in service.swarm_api(manager).services(filters=filters)]
        found += [f"secret {s['Spec']['Name']}" for s in service.swarm_api(manager).secrets(filters=filters)]
        found += [f"network {n['Name']}" for n in service.swarm_api(manager).networks(filters=filters)]
        for node in NODES:
            engine = self.engine(node)
            found += [
                f"{node}: container {c.name}"
                for c in engine.containers.list(all=True, filters=filters, ignore_removed=True)
            ]
            found += [f"{node}: volume {v.name}" for v in engine.volumes.list(filters=filters)]
        return found


def _script(*args: str) -> str:
    done = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError((done.stderr or done.stdout).strip().splitlines()[-1])
    return done.stdout


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The three-engine swarm, started for this session unless it already runs (then left running); the
    swarm tests' image in every engine."""
    if os.geteuid() != 0:
        pytest.skip("the swarm tests need root (network namespaces and engines of their own)")
    was_up = subprocess.run([str(SCRIPT), "status"], capture_output=True, check=False).returncode == 0
    try:
        _script("up")
    except RuntimeError as exc:
        pytest.skip(f"no test swarm on this machine: {exc}")
    try:
        image = swarm_image()
        if not image_is_current(image, BASE, CLAUDE_CODE_VERSION, SWARM_AGENTS):
            log: list[str] = []
            try:
                build_image(BASE, CLAUDE_CODE_VERSION, CA_BUNDLE, image, log.append, SWARM_AGENTS)
            except (UsageError, SandboxError) as exc:
                pytest.fail(f"building {image} failed: {exc.one_line()}\n" + "\n".join(log[-40:]))
        _script("load", image)
        yield Cluster(image)
    finally:
        if not was_up:
            with contextlib.suppress(RuntimeError):
                _script("down")


@pytest.fixture
def manager(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    """DOCKER_HOST names the cluster's manager, as for a user whose manager is another machine's engine."""
    monkeypatch.setenv("DOCKER_HOST", cluster.manager)
    return cluster


def demo_run(name: str, image: str, constraints: list[str]) -> tuple[SwarmSandbox, RunFolder]:
    """The offline demo (three Claude Code workers, a finding to confirm and one to refute) made as a swarm
    lead run, as `orch run --backend swarm` makes it: the run's objects and folder, its spec and state pushed
    to its collector; its first life not started yet."""
    spec, _ = demo.prepare(name)
    options = ContainerOptions(egress=EgressMode.NONE)
    settings = SwarmSettings(
        image=image, options=options, boot_timeout=spec.timeouts.boot, constraints=constraints, drive=True
    )
    box = SwarmSandbox(settings)
    info = box.up(up_request(spec, name, strict_ok=True))
    run = RunFolder.for_name(name)
    write_spec(run, spec)
    save_state(run, initial_state(run, spec, None))
    box.push(info, [run.fleet_spec, run.controller_state])
    return box, run


def findings(run: RunFolder) -> dict[str, FindingStatus]:
    return {finding.id: finding.status for finding in load_report(run).findings}

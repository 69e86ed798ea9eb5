"""Bad input and faults of the docker backend: one clear line, the right exit code, nothing half-created."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable
from pathlib import Path

import docker
import docker.errors
import pytest

from orch.backends.docker import boot
from orch.backends.docker.backend import DockerSettings
from orch.backends.docker.sandbox import DockerSandbox
from orch.contracts import UpRequest
from orch.errors import SandboxError, UsageError
from orch.run.records import ContainerOptions, EgressMode, Isolation
from tests.dockertest import BASE, BUILD_TIMEOUT, CA_BUNDLE, IMAGE, new_name, nothing_left, unique
from tests.helpers import orch

pytestmark = [pytest.mark.docker, pytest.mark.timeout(BUILD_TIMEOUT)]


_HELD: list[socket.socket] = []
"""The closed ports' sockets, bound for the session and never listening: released, another process on this
shared machine could take one and answer the connection meant to be refused."""


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    _HELD.append(s)
    return int(s.getsockname()[1])


def _engine_missing(mp: pytest.MonkeyPatch, engine: docker.DockerClient, name: str, wd: Path) -> list[str]:
    mp.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    return []


def _remote_unreachable(mp: pytest.MonkeyPatch, engine: docker.DockerClient, name: str, wd: Path) -> list[str]:
    mp.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{_closed_port()}")
    return ["--copy"]


def _ssh_unreachable(mp: pytest.MonkeyPatch, engine: docker.DockerClient, name: str, wd: Path) -> list[str]:
    mp.setenv("DOCKER_HOST", f"ssh://nobody@127.0.0.1:{_closed_port()}")
    return ["--copy"]


def _image_missing(mp: pytest.MonkeyPatch, engine: docker.DockerClient, name: str, wd: Path) -> list[str]:
    return ["--image", "orch-test-missing:nope"]


def _collision(mp: pytest.MonkeyPatch, engine: docker.DockerClient, name: str, wd: Path) -> list[str]:
    # A container of a run already holds the name: without --replace, orch must not touch it.
    engine.containers.create(IMAGE, ["true"], name=f"orch-{name}", labels={"orch.run": name, "orch.managed": "true"})
    return []


def _foreign(mp: pytest.MonkeyPatch, engine: docker.DockerClient, name: str, wd: Path) -> list[str]:
    # Someone else's container has the name: orch never touches it, not even with --replace.
    engine.containers.create(IMAGE, ["true"], name=f"orch-{name}", labels={"orch.run": name})
    return ["--replace"]


def _missing_workdir(mp: pytest.MonkeyPatch, engine: docker.DockerClient, name: str, wd: Path) -> list[str]:
    return ["--workdir", str(wd / "does-not-exist")]


def _bad_allow(mp: pytest.MonkeyPatch, engine: docker.DockerClient, name: str, wd: Path) -> list[str]:
    return ["--allow", "bad host; rm -rf"]


Setup = Callable[[pytest.MonkeyPatch, docker.DockerClient, str, Path], list[str]]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (_engine_missing, "Docker engine not reachable at unix:///nonexistent.sock: no engine socket there"),
        (_remote_unreachable, "connection refused"),
        (_ssh_unreachable, "`ssh -p "),
        (_image_missing, "orch image build"),
        (_collision, "already exists (container orch-"),
        (_foreign, "that orch did not create"),
        (_missing_workdir, "workdir does not exist"),
        (_bad_allow, "not a host name, IP or CIDR"),
    ],
    ids=[
        "engine-missing",
        "remote-unreachable",
        "ssh-unreachable",
        "image-missing",
        "name-collision",
        "foreign-container",
        "missing-workdir",
        "bad-allow",
    ],
)
def test_up_faults(
    setup: Setup,
    message: str,
    image: str,
    names: list[str],
    workdir: Path,
    engine: docker.DockerClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = new_name(names, "ft")
    extra = setup(monkeypatch, engine, name, workdir)
    args = ["up", name, "--agent", "scripted", "--egress", "none"]
    if "--workdir" not in extra:
        args += ["--workdir", str(workdir)]
    result = orch(*args, *extra)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    if setup in (_collision, _foreign):
        assert engine.containers.get(f"orch-{name}").status == "created"  # left alone
        engine.containers.get(f"orch-{name}").remove()
    nothing_left(engine, name)


def test_failed_boot_inside_removes_everything(
    image: str, names: list[str], workdir: Path, engine: docker.DockerClient
) -> None:
    """The controller fails inside (here: workers cannot boot in 0 s): one line with the container's
    last words, container and run folder gone."""
    name = new_name(names, "ft")
    result = orch("up", name, "-n", "2", "--agent", "scripted", "--workdir", workdir, "--boot-timeout", "0")
    assert result.exit_code == 1, result.output
    assert "the container exited (code 1) while starting" in result.output
    assert "did not boot within 0s" in result.output
    # One line says why; before it only the progress of the workers that did boot (`worker 1 booted`).
    lines = result.output.strip().splitlines()
    assert lines[-1].startswith("orch: error:") and all(" booted (" in line for line in lines[:-1]), lines
    nothing_left(engine, name)


def test_firewall_failure_stops_the_run(
    image: str, names: list[str], workdir: Path, engine: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without NET_ADMIN the egress policy cannot be applied: the container must not start the run."""
    name = new_name(names, "ft")
    sandbox = DockerSandbox(DockerSettings(image=image, options=ContainerOptions(egress=EgressMode.NONE)))
    monkeypatch.setattr(boot, "FIREWALL_CAPS", [])  # the container is created without NET_*
    with pytest.raises(SandboxError, match="egress policy failed"):
        sandbox.up(UpRequest(name=name, workers=1, agent="scripted", workdir=workdir))
    nothing_left(engine, name)


def test_a_strict_run_with_checks_and_open_egress_is_refused_on_the_host(
    names: list[str], workdir: Path, engine: docker.DockerClient
) -> None:
    """Its checks need a uid the firewall cuts off, which an open egress does not: refused in one line before the
    engine is asked anything (no image needed), not by the controller once the container and run folder exist."""
    name = new_name(names, "ft")
    sandbox = DockerSandbox(DockerSettings(image=IMAGE, options=ContainerOptions(egress=EgressMode.OPEN)))
    request = UpRequest(name=name, workers=1, agent="scripted", workdir=workdir, isolation=Isolation.STRICT,
                        writers=True, checks=True)  # fmt: skip
    with pytest.raises(UsageError, match=r"^the container's firewall does not cut the checks' uid off the network"):
        sandbox.up(request)
    nothing_left(engine, name)


def test_image_build_cli_streams_progress(image: str, engine: docker.DockerClient) -> None:
    """`orch image build` prints the engine's progress as it builds (here from cache: the sources are built)."""
    tag = f"{unique('orch-test-cli')}:latest"
    ca = ["--ca-bundle", str(CA_BUNDLE)] if CA_BUNDLE else []
    args = ["image", "build", "--base-image", BASE, "--tag", tag, *ca]
    try:
        result = orch(*args)
        assert result.exit_code == 0, result.output[-2000:]
        assert "Step 1/" in result.output and result.output.strip().splitlines()[-1].startswith(f"built {tag}")
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            engine.images.remove(tag)


def test_image_build_cli_bad_ca_bundle(tmp_path: Path) -> None:
    result = orch("image", "build", "--ca-bundle", tmp_path / "nope.pem")
    assert result.exit_code == 2 and "CA bundle not found" in result.output

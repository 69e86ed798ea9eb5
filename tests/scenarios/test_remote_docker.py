"""A remote engine: a second engine endpoint on this machine, reached the two ways users reach one:
`DOCKER_HOST=tcp://127.0.0.1:PORT` (relayed to the local engine's socket) and `DOCKER_HOST=ssh://...` (a
real sshd on 127.0.0.1, the system ssh client, `docker system dial-stdio` on the far side); see
tests/engine_proxy.py. The client sees a non-local base URL, so orch treats the engine as remote: the run
folder is a labelled volume over there, local paths are not bind-mounted (`--copy` uploads the workdir),
and `orch wait --pull` / `orch pull` / `orch kill` copy the folder back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from orch.backends.docker.sandbox import DockerSandbox
from orch.container.layout import LABEL_RUN, run_volume_name
from orch.jobs.state import JobStatus, load_state
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import DockerRunInfo, RunStatus
from orch.view.snapshot import Snapshot
from tests.dockertest import (
    BASE,
    BUILD_TIMEOUT,
    events,
    in_gate,
    kill_container_while_running,
    new_name,
    nothing_left,
    one_finding_spec,
    script_brief,
)
from tests.engine_proxy import SSHD, EngineProxy, SshEndpoint
from tests.helpers import orch

pytestmark = [pytest.mark.docker, pytest.mark.claude, pytest.mark.timeout(BUILD_TIMEOUT)]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshEndpoint]:
    """A real sshd on 127.0.0.1 whose root runs `docker system dial-stdio`: DOCKER_HOST=ssh://... as on a VPS."""
    if os.getuid() != 0 or not Path(SSHD).is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI runs as root with openssh-server installed (.ci/run): {SSHD} missing or not root")
        pytest.skip("the ssh engine test needs root and openssh-server (apt-get install openssh-server)")
    with SshEndpoint.start(tmp_path_factory.mktemp("sshd")) as endpoint:
        yield endpoint


@pytest.fixture(params=["tcp", "ssh"])
def remote(
    request: pytest.FixtureRequest, engine: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    if request.param == "ssh":
        endpoint: SshEndpoint = request.getfixturevalue("sshd")
        monkeypatch.setenv("PATH", f"{endpoint.bin_dir}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("DOCKER_HOST", endpoint.url)
        yield endpoint.url
        return
    with EngineProxy() as proxy:
        monkeypatch.setenv("DOCKER_HOST", proxy.url)
        yield proxy.url


def test_remote_engine_run_pull_and_kill(
    image: str, remote: str, names: list[str], workdir: Path, tmp_path: Path, engine: docker.DockerClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    name = new_name(names, "rm")
    # Without --copy, a local path cannot be mounted there: refused, nothing created.
    result = orch("up", name, "--isolation", "shared", "--workdir", workdir, "--offline", "--egress", "none")
    assert result.exit_code == 2 and "is remote" in result.output and "--copy" in result.output
    nothing_left(engine, name)

    result = orch("up", name, "--isolation", "shared", "--workdir", workdir, "--offline", "--egress", "none", "--copy")
    assert result.exit_code == 0, result.output
    run = RunFolder.for_name(name)
    info = run.info()
    assert isinstance(info, DockerRunInfo) and info.container.on_remote_engine and info.container.docker_host == remote
    assert info.container.run_volume == run_volume_name(name)
    assert not run.bus.exists()  # the folder lives on the engine's side; here only run.json
    assert engine.volumes.get(run_volume_name(name)).attrs["Labels"][LABEL_RUN] == name

    # Commands reach it from anywhere: the run remembers its engine even with DOCKER_HOST unset.
    monkeypatch.delenv("DOCKER_HOST")
    assert "idle" in orch("status", name).output
    brief = tmp_path / "brief.md"
    brief.write_text(script_brief(run, 1))
    assert orch("brief", name, "1", brief).exit_code == 0
    assert orch("bus", "post", name, "hello from the lead").exit_code == 0
    result = orch("wait", name, "--timeout", "120", "--pull")
    assert result.exit_code == 0, result.output
    assert "worker 1 checked in" in run.bus.read_text() and "hello from the lead" in run.bus.read_text()
    assert "all good" in run.result(1).read_text() and run.done(1).exists()
    assert "worker 1 checked in" in orch("bus", "tail", name).output
    # `orch watch` reads the copy here, pulled first: the worker's done flag and its bus line.
    watched = orch("watch", name, "--json")
    assert watched.exit_code == 0, watched.output
    snap = Snapshot.model_validate_json(watched.output)
    assert snap.workers[0].done and any("worker 1 checked in" in b.text for b in snap.bus)
    info = run.info()
    assert isinstance(info, DockerRunInfo) and info.container.last_pull is not None
    assert (workdir / "README.md").read_text() == "a project\n"

    # kill pulls everything once more, then removes the container; reap then drops the volume.
    assert orch("kill", name).exit_code == 0
    assert run.info().status is RunStatus.STOPPED and run.log(1).stat().st_size > 0
    assert not engine.containers.list(all=True, filters={"label": f"{LABEL_RUN}={name}"}, ignore_removed=True)
    assert orch("pull", name).exit_code == 0  # from the volume, through a throwaway helper container
    # The engine no longer has the helper's image: one line saying what failed, nothing half-done.
    info = run.info()
    assert isinstance(info, DockerRunInfo)
    run.write_info(info.model_copy(update={"container": info.container.model_copy(update={"image": "orch-gone:0"})}))
    result = orch("pull", name)
    assert result.exit_code != 0 and f"cannot copy run {name} back" in result.output, result.output
    assert "Traceback" not in result.output and run.log(1).stat().st_size > 0
    run.write_info(info)
    result = orch("reap")
    assert f"volume {run_volume_name(name)}" in result.output, result.output
    assert not engine.volumes.list(filters={"label": f"{LABEL_RUN}={name}"})


def test_demo_runs_on_a_remote_engine(
    image: str, remote: str, names: list[str], engine: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`orch run` (here through `orch demo`) with the engine on another machine: the spec goes with the
    workdir's copy, the controller runs over there, its commentary streams back, and the report is
    copied back into the local run folder before the container goes."""
    monkeypatch.setenv("ORCH_BASE_IMAGE", BASE)  # the image the fixture built is current for this base
    name = new_name(names, "rdemo")
    result = orch("demo", "--name", name)
    assert result.exit_code == 0, result.output
    assert "(docker)" in result.output and result.output.count("RESULT") == 1
    assert result.output.count(" CONFIRMED pages-F1 (") == 2 and result.output.count(" REFUTED stats-F1 (") == 2
    run = RunFolder.for_name(name)
    report = json.loads(run.report_json.read_text())
    assert {row["id"]: row["status"] for row in report["findings"]} == {"pages-F1": "CONFIRMED", "stats-F1": "REFUTED"}
    assert run.report_html.is_file() and run.log(1).stat().st_size > 0
    assert not engine.containers.list(all=True, filters={"label": f"{LABEL_RUN}={name}"}, ignore_removed=True)


@pytest.mark.parametrize("remote", ["tcp"], indirect=True)
def test_run_on_a_remote_engine_resumes_after_its_container_is_killed(
    image: str, remote: str, names: list[str], engine: docker.DockerClient, workdir: Path, tmp_path: Path
) -> None:
    """The remote container dies mid-verification: `orch run --resume` starts a new one on the run's
    volume (the state there, not this machine's stale copy, is what continues), and nothing is redone."""
    # Blocks in the first container's life only: its hook log (in the run's volume, which outlives the
    # container) holds this command once in the first life, twice in the second. A marker file did not do:
    # the tree is read-only to a strict worker, and one in its outbox was gone in the second life, which then
    # blocked too, until Claude Code's Bash tool gave up after 2 minutes (the test took 131 s).
    gate = 'test "$(grep -c first-life "$ORCH_STATE_FILE")" -gt 1 || while :; do sleep 0.2; done'
    spec = one_finding_spec(tmp_path / "fleet.yaml", workdir, gate)
    name = new_name(names, "rres")

    def verifying(run: RunFolder) -> bool:
        if not run.exists() or run.info().status is not RunStatus.RUNNING:
            return False
        DockerSandbox().pull(run.info())  # the hook logs are over there
        return in_gate(run, "first-life")

    kill_container_while_running(engine, ["run", str(spec), "--name", name, "--copy"], name, verifying)
    run = RunFolder.for_name(name)

    result = orch("run", "--resume", name)
    assert result.exit_code == 0, result.output
    assert " W2 CONFIRMED t1-F1 (t1-F1.v1)" in result.output  # commentary streamed back
    state = load_state(run)
    assert state.job("t1").status is JobStatus.DONE and [v.job for v in state.verdicts] == ["t1-F1.v1"]
    seen = [e["event"] for e in events(run)]
    assert seen.count(Event.CONTROLLER_STARTED) == 2
    assert [e["data"]["job"] for e in events(run) if e["event"] == Event.BRIEF_SENT] == ["t1", "t1-F1.v1"]
    assert json.loads(run.report_json.read_text())["findings"][0]["status"] == "CONFIRMED"
    assert not engine.containers.list(
        all=True, filters={"label": f"{LABEL_RUN}={name}"}, ignore_removed=True
    )  # torn down

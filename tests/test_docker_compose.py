"""compose.yaml, driven the way its header says (`docker compose run`, or compose v1's `docker-compose run`):
a fleet of real Claude Code workers (offline) in one hardened container, runs folder and workspace as
volumes; briefed through `docker exec`, its bus lines, results and done flags land in the runs volume;
nothing in it runs as root or with a capability; a second `run` of the same fleet resumes its sessions.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
import pytest
from docker.models.containers import Container

from orch.serverun import READY_LINE
from orch.waits import wait_until
from tests.dockertest import BUILD_TIMEOUT, PROCESS_SCRIPT, assert_unprivileged, unique

pytestmark = [pytest.mark.docker, pytest.mark.claude, pytest.mark.timeout(BUILD_TIMEOUT)]
COMPOSE_FILE = Path(__file__).resolve().parent.parent / "compose.yaml"
RUN = "cmp"
UID = 1000


def _compose_cli() -> list[str]:
    docker_cli = shutil.which("docker")
    if docker_cli and subprocess.run([docker_cli, "compose", "version"], capture_output=True).returncode == 0:
        return [docker_cli, "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if os.environ.get("CI") == "true":
        pytest.fail("CI needs docker compose (.ci/run installs Debian's docker-compose)")
    pytest.skip("neither `docker compose` nor `docker-compose` is installed (apt-get install docker-compose)")


@dataclass
class Project:
    cli: list[str]
    name: str
    engine: docker.DockerClient

    def run(self, container_name: str) -> Container:
        env = {
            **os.environ,
            "ORCH_RUN": RUN,
            "ORCH_WORKERS": "2",
            "ORCH_OFFLINE": "1",
            "ORCH_EGRESS": "none",
            "ORCH_UID": str(UID),
        }
        cmd = [*self.cli, "-f", str(COMPOSE_FILE), "-p", self.name, "run", "-d", "--name", container_name, "fleet"]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        container = self.engine.containers.get(container_name)

        def ready() -> bool:
            container.reload()
            assert container.status == "running", container.logs().decode(errors="replace")
            return READY_LINE in container.logs().decode(errors="replace")

        wait_until(ready, 120, "the compose fleet to start its workers", interval=0.5)
        return container


def sh(container: Container, script: str, **env: str) -> str:
    code, out = container.exec_run(["sh", "-c", script], user=str(UID), environment=env)
    assert isinstance(out, bytes)
    text = out.decode(errors="replace")
    assert code == 0, text
    return text


@pytest.fixture
def project(engine: docker.DockerClient, image: str) -> Iterator[Project]:
    cli = _compose_cli()
    proj = Project(cli, unique("orchcompose"), engine)
    yield proj
    for container in engine.containers.list(all=True, filters={"label": f"com.docker.compose.project={proj.name}"}):
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True)
    subprocess.run([*cli, "-f", str(COMPOSE_FILE), "-p", proj.name, "down", "-v"], capture_output=True, timeout=120)


def test_compose_runs_a_fleet_and_resumes_it(project: Project) -> None:
    fleet = project.run(f"{project.name}-1")
    status = json.loads(sh(fleet, f"orch status {RUN} --json"))
    assert [w["state"] for w in status[0]["workers"]] == ["idle", "idle"]
    inside = f"/orch/runs/{RUN}"
    for n in (1, 2):
        steps = [
            {"bash": f"orch bus post {RUN} --as {n} 'worker {n} checked in'"},
            {"write": f"{inside}/agent-{n}.result.md", "content": f"# Result {n}\nall good\n"},
            {"bash": f"touch {inside}/agent-{n}.done"},
            {"reply": "Finished."},
        ]
        brief = "# Task\n\n```orch-script\n" + "\n".join(json.dumps(s) for s in steps) + "\n```\n"
        sh(fleet, f'printf "%s" "$BRIEF" | orch brief {RUN} {n} -', BRIEF=brief)
    sh(fleet, f"orch wait {RUN} --timeout 120")
    bus = sh(fleet, f"cat {inside}/bus.md")
    assert "[W1] worker 1 checked in" in bus and "[W2] worker 2 checked in" in bus
    owners = sh(fleet, f"stat -c %u {inside}/agent-1.result.md {inside}/agent-2.done /workspace").split()
    assert owners == [str(UID)] * 3
    assert_unprivileged(sh(fleet, 'python3 -c "$S"', S=PROCESS_SCRIPT), UID)
    attrs = fleet.attrs["HostConfig"]
    assert attrs["ReadonlyRootfs"] and attrs["CapDrop"] == ["ALL"] and attrs["PidsLimit"] == 4096
    assert {m["Destination"] for m in fleet.attrs["Mounts"]} == {"/orch/runs", "/workspace"}

    fleet.stop(timeout=20)  # SIGTERM: workers stop, the run folder stays, marked stopped
    fleet.reload()
    assert fleet.attrs["State"]["ExitCode"] == 0

    again = project.run(f"{project.name}-2")  # the same fleet again: resumed on its folder
    events = [json.loads(line) for line in sh(again, f"cat {inside}/state/agent-1.jsonl").splitlines()]
    starts = [e for e in events if e["hook_event_name"] == "SessionStart"]
    assert [s["source"] for s in starts] == ["startup", "resume"]
    assert starts[0]["session_id"] == starts[1]["session_id"]
    assert "all good" in sh(again, f"cat {inside}/agent-2.result.md")

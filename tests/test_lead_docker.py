"""`orch demo` on the container backend: the controller runs inside the run's container, next to the workers."""

from __future__ import annotations

import json
from pathlib import Path

import docker
import pytest

from orch.docker_layout import LABEL_RUN
from orch.jobs import load_state
from orch.workspace import RunFolder
from tests.dockertest import BASE, BUILD_TIMEOUT, new_name
from tests.helpers import orch

pytestmark = [pytest.mark.docker, pytest.mark.claude, pytest.mark.timeout(BUILD_TIMEOUT)]


def test_demo_runs_in_a_container(
    image: str, names: list[str], engine: docker.DockerClient, monkeypatch: pytest.MonkeyPatch, claude_bin: Path
) -> None:
    monkeypatch.setenv("ORCH_BASE_IMAGE", BASE)  # the image the fixture built is current for this base
    name = new_name(names, "demo")
    result = orch("demo", "--name", name)
    assert result.exit_code == 0, result.output
    assert "(docker)" in result.output and "locally" not in result.output
    assert result.output.count("RESULT") == 1  # the host prints the matrix; the container stays quiet
    run = RunFolder.for_name(name)
    report = json.loads(run.report_json.read_text())
    assert {row["id"]: row["status"] for row in report["findings"]} == {
        "pages-F1": "CONFIRMED",
        "stats-F1": "REFUTED",
    }
    state = load_state(run)
    assert all(j.worker != state.finding(j.finding).finder for j in state.jobs if j.finding is not None)
    assert report["workdir"] == "/workspace"  # the controller ran inside the container
    # Torn down: the container is gone, the run folder (report, transcripts) stays on the host.
    assert not engine.containers.list(all=True, filters={"label": f"{LABEL_RUN}={name}"})
    assert run.log(1).stat().st_size > 0

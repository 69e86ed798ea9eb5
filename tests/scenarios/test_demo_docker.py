"""`orch demo` on the container backend: the controller runs inside the run's container, next to the workers."""

from __future__ import annotations

import json
from pathlib import Path

import docker
import pytest

from orch.container.layout import LABEL_RUN
from orch.jobs.state import JobStatus, load_state
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.terminal import pane_sizes
from tests.dockertest import (
    BASE,
    BUILD_TIMEOUT,
    events,
    in_gate,
    kill_container_while_running,
    new_name,
    one_finding_spec,
)
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
    # ... and the commentary, read from the bind-mounted events.jsonl, once per verdict.
    assert result.output.count(" CONFIRMED pages-F1 (") == 2 and result.output.count(" REFUTED stats-F1 (") == 2
    run = RunFolder.for_name(name)
    report = json.loads(run.report_json.read_text())
    assert {row["id"]: row["status"] for row in report["findings"]} == {
        "pages-F1": "CONFIRMED",
        "stats-F1": "REFUTED",
    }
    state = load_state(run)
    assert all(j.worker != state.finding(j.finding).finder for j in state.jobs if j.finding is not None)
    assert report["workdir"] == "/workspace"  # the controller ran inside the container
    assert report["isolation"] == "strict" and report["attempts"] == []  # honest workers tried nothing more
    # Torn down: the container is gone, the run folder (report, transcripts) stays on the host.
    assert not engine.containers.list(all=True, filters={"label": f"{LABEL_RUN}={name}"}, ignore_removed=True)
    assert run.log(1).stat().st_size > 0
    # The container gone, its folder answers: the outcome, and a worker's terminal as it was (its pane's size).
    shown = orch("status", name)
    assert "passed (exit 0)" in shown.output and "engine unreachable" not in shown.output, shown.output
    assert sorted(pane_sizes(run)) == [1, 2, 3] and "Finished: one finding." in orch("read", name, "2").output


def test_run_resumes_after_its_container_is_killed(
    image: str, names: list[str], engine: docker.DockerClient, workdir: Path, tmp_path: Path, claude_bin: Path
) -> None:
    """The container (controller and workers) dies mid-verification: `orch run --resume` starts a new one on
    the same folder, the sessions resume, and nothing accepted before is redone."""
    spec = one_finding_spec(tmp_path / "fleet.yaml", workdir, "while [ ! -e {{workdir}}/gate ]; do sleep 0.2; done")
    name = new_name(names, "rr")
    kill_container_while_running(engine, ["run", str(spec), "--name", name], name, lambda r: in_gate(r, "gate"))
    run = RunFolder.for_name(name)
    before = load_state(run)
    assert before.job("t1").status is JobStatus.DONE and before.job("t1-F1.v1").status is JobStatus.RUNNING

    (workdir / "gate").touch()
    result = orch("run", "--resume", name)
    assert result.exit_code == 0, result.output
    state = load_state(run)
    assert [v.job for v in state.verdicts] == ["t1-F1.v1"] and state.verdicts[0].verifier == 2
    names_seen = [e["event"] for e in events(run)]
    assert Event.FLEET_RELAUNCHING in names_seen and names_seen.count(Event.CONTROLLER_STARTED) == 2
    assert [e["data"]["job"] for e in events(run) if e["event"] == Event.BRIEF_SENT] == ["t1", "t1-F1.v1"]
    assert any(e["event"] == Event.REPOINT_SENT and e["worker"] == 2 for e in events(run))
    starts = [e for e in run.hook_events(2) if e.hook_event_name == "SessionStart"]
    assert len(starts) == 2 and starts[0].session_id == starts[1].session_id  # the verifier's session resumed
    assert not engine.containers.list(
        all=True, filters={"label": f"{LABEL_RUN}={name}"}, ignore_removed=True
    )  # torn down

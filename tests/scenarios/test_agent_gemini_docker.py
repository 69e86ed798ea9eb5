"""Gemini CLI's own case in a container (the shared suite: test_agents.py): under the run's allow policy its
approver presses Allow on the dialog through the pane socket of its own, since the run's tmux server is out of a
strict worker's reach; the call then runs."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from tests.dockertest import BUILD_TIMEOUT
from tests.helpers import orch
from tests.scenarios.test_agents_docker import policy_run

pytestmark = [pytest.mark.docker, pytest.mark.gemini, pytest.mark.timeout(BUILD_TIMEOUT)]


def test_allow_policy_is_pressed_through_its_own_pane_socket(
    image: str, engine: docker.DockerClient, names: list[str], tmp_path: Path
) -> None:
    run = policy_run("gemini", "allow", names, tmp_path)
    asked = [e for e in run.hook_events(1) if e.hook_event_name == "PermissionRequest"]
    assert [(e.orch_decision, e.tool_name) for e in asked] == [("allow", "web_fetch")], asked
    # The call ran (and failed: nothing listens there), and no dialog is left on screen.
    assert any(e.hook_event_name == "PostToolUse" and e.tool_name == "web_fetch" for e in run.hook_events(1))
    assert "Allow once" not in orch("read", run.name, "1").output
    assert orch("kill", run.name).exit_code == 0

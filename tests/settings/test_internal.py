"""orch.settings.internal: the workers' first prompts read from JSON, a run gateway's handle here and in a run's
container."""

from __future__ import annotations

from pathlib import Path

import pytest

from orch.settings.internal import IN_CONTAINER, PROMPTS, gateway_handle

pytestmark = pytest.mark.pure


def test_prompts_are_a_json_object_of_worker_numbers() -> None:
    assert PROMPTS.get({}) == {}
    assert PROMPTS.get({PROMPTS.name: '{"1": "look", "2": "fix"}'}) == {1: "look", 2: "fix"}


def test_a_gateway_handle_is_under_orch_home_here_and_in_the_temp_dir_in_a_container(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    assert gateway_handle("r1") == tmp_path / "home" / "gateways" / "r1.json"
    monkeypatch.setenv(IN_CONTAINER.name, "1")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    assert gateway_handle("r1") == tmp_path / "tmp" / "orch-gateway-r1.json"

"""Fleets of different agents: cross-kind verification end to end (Claude Code and Codex CLI, offline)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orch.run.folder import RunFolder
from tests.helpers import orch

pytestmark = [pytest.mark.claude, pytest.mark.codex]


@pytest.fixture
def agents(claude_bin: Path, codex_bin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_CLAUDE_BIN", str(claude_bin))
    monkeypatch.setenv("ORCH_CODEX_BIN", str(codex_bin))


def test_a_live_fleet_across_model_apis_is_refused(agents: None, tmp_path: Path) -> None:
    result = orch("up", "live", "--local", "--agents", "claude:1,codex:1", "--workdir", tmp_path)
    assert result.exit_code == 2, result.output
    assert "cannot run live yet" in result.output and len(result.output.strip().splitlines()) == 1
    assert not RunFolder.for_name("live").root.exists()

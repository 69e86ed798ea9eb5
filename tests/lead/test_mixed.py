"""Fleets of different agents: cross-kind verification end to end (Claude Code and Codex CLI, offline)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orch.lead.jobs import load_state
from orch.run.folder import RunFolder
from tests.helpers import orch

pytestmark = [pytest.mark.claude, pytest.mark.codex]


@pytest.fixture
def agents(claude_bin: Path, codex_bin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_CLAUDE_BIN", str(claude_bin))
    monkeypatch.setenv("ORCH_CODEX_BIN", str(codex_bin))


def test_mixed_demo_verifies_each_finding_across_kinds(agents: None) -> None:
    result = orch("demo", "--mixed", "--local", "--name", "mixed")
    assert result.exit_code == 0, result.output
    run = RunFolder.for_name("mixed")
    info = run.info()
    assert info.agent == "claude" and info.worker_agents == {2: "codex", 3: "codex"}
    state = load_state(run)
    kinds = {b.n: b.agent for b in state.workers}
    for verdict in state.verdicts:  # the Claude Code finding went to Codex workers only
        finder = state.finding(verdict.finding).finder
        if kinds[finder] == "claude":
            assert kinds[verdict.verifier] == "codex"
    report = json.loads(run.report_json.read_text())
    assert {row["id"]: row["status"] for row in report["findings"]} == {"pages-F1": "CONFIRMED", "stats-F1": "REFUTED"}
    assert report["confirmed_across_kinds"] == 1
    assert "W2 codex" in result.output and "Confirmed across agent kinds: 1 of 1" in run.report_md.read_text()


def test_a_live_fleet_across_model_apis_is_refused(agents: None, tmp_path: Path) -> None:
    result = orch("up", "live", "--local", "--agents", "claude:1,codex:1", "--workdir", tmp_path)
    assert result.exit_code == 2, result.output
    assert "cannot run live yet" in result.output and len(result.output.strip().splitlines()) == 1
    assert not RunFolder.for_name("live").root.exists()

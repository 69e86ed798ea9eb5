"""`orch demo --changes` end to end with real agents of two kinds (Claude Code, Codex CLI), offline: an honest
fix lands after a Codex worker's review, a test-editing "fix" is REJECTED (scope), two changes to one line land
one after the other (a rebase, reviewed again), and the demo ends with the matrix and the `orch apply` command."""

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


def test_changes_demo_lands_rejects_and_rebases(agents: None) -> None:
    result = orch("demo", "--changes", "--local", "--name", "chdemo")
    run = RunFolder.for_name("chdemo")
    assert result.exit_code == 0, result.output
    rows = {row["task"]: row for row in json.loads(run.report_json.read_text())["changes"]}
    assert {t: r["status"] for t, r in rows.items()} == {"mean": "LANDED", "cheat": "REJECTED", "note": "LANDED"}
    state = load_state(run)
    kinds = {b.n: b.agent for b in state.workers}
    # Every approval came from another kind than its writer, with a command the gateway's ledger shows it ran.
    approvals = [(state.change(r.change).writer, r.reviewer) for r in state.reviews if r.report.verdict == "CONFIRMED"]
    assert approvals and all(kinds[w] != kinds[r] for w, r in approvals)
    rebased = next(c for c in state.changes if c.rebase_of is not None)
    assert rebased.reviewed is None  # its patch changed beyond context: reviewed again
    assert "orch apply chdemo" in result.output and "REJECTED (scope)" in result.output

"""`orch demo --mixed` end to end: Claude Code, Codex CLI and Gemini CLI verify each other's findings
(offline), and the recorded run replays without a model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orch.jobs.state import load_state
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.paths import orch_home
from tests.helpers import orch

pytestmark = [pytest.mark.claude, pytest.mark.codex, pytest.mark.gemini]


@pytest.fixture
def agents(claude_bin: Path, codex_bin: Path, gemini_bin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_CLAUDE_BIN", str(claude_bin))
    monkeypatch.setenv("ORCH_CODEX_BIN", str(codex_bin))
    monkeypatch.setenv("ORCH_GEMINI_BIN", str(gemini_bin))


def test_mixed_demo_verifies_each_finding_across_kinds_and_replays_without_a_model(agents: None) -> None:
    """The mixed demo, recorded by its gateway as every run is, then `orch run --replay`ed: the scripted
    model is not consulted, and the replay hands out the same jobs, reaches the same verdicts and keeps the
    same books."""
    result = orch("demo", "--mixed", "--local", "--name", "mixed")
    assert result.exit_code == 0, result.output
    run = RunFolder.for_name("mixed")
    info = run.info()
    assert info.agent == "claude" and info.worker_agents == {2: "codex", 3: "gemini"}
    state = load_state(run)
    kinds = {b.n: b.agent for b in state.workers}
    judged = {(state.finding(v.finding).finder, v.verifier) for v in state.verdicts}
    assert judged == {(1, 2), (1, 3), (2, 1), (2, 3)}  # each finding by both other kinds, Gemini CLI included
    assert all(kinds[finder] != kinds[verifier] for finder, verifier in judged)
    report = json.loads(run.report_json.read_text())
    assert {row["id"]: row["status"] for row in report["findings"]} == {"pages-F1": "CONFIRMED", "stats-F1": "REFUTED"}
    assert report["confirmed_across_kinds"] == 1
    assert "W2 codex" in result.output and "Confirmed across agent kinds: 1 of 1" in run.report_md.read_text()
    assert state.flags == []  # every verifier's output, Gemini CLI's included, was accepted at once

    spec = orch_home() / "demo" / "mixed" / "fleet.yaml"
    replayed = orch("run", spec, "--local", "--replay", "mixed", "--name", "mixed-replay")
    assert replayed.exit_code == 0, replayed.output  # the demo's verdicts, as recorded: it passes
    again = RunFolder.for_name("mixed-replay")
    assert load_state(again).replay_of == str(run.root)
    assert _matrix(again) == _matrix(run)
    # The same jobs to the same workers; their order is the order the findings came in, a matter of timing.
    assert sorted(_handed_out(again)) == sorted(_handed_out(run))
    assert "replay-miss" not in again.model_log.read_text()
    assert _books(again) == _books(run)
    assert _ledger(again) == _ledger(run)


def _matrix(run: RunFolder) -> set[tuple[str, int, str]]:
    """Every accepted verdict: (finding, verifier, verdict)."""
    return {(v.finding, v.verifier, v.report.verdict.value) for v in load_state(run).verdicts}


def _handed_out(run: RunFolder) -> list[tuple[int | None, str]]:
    lines = [json.loads(line) for line in run.events.read_text().splitlines()]
    return [(e["worker"], e["data"]["job"]) for e in lines if e["event"] == Event.ASSIGNED]


def _books(run: RunFolder) -> dict[str, Any]:
    """The gateway's usage books, per worker and job (tokens, requests, cost); a replay bills nothing either."""
    usage = json.loads(run.model_usage.read_text())
    assert usage["billed"] is False
    keep = ("input_tokens", "output_tokens", "requests", "cost_usd")
    return {
        n: {job: {k: round(v[k], 6) for k in keep} for job, v in book["by_job"].items()}
        for n, book in usage["workers"].items()
    }


def _ledger(run: RunFolder) -> list[tuple[int, str | None, str | None, str]]:
    """The tool calls each worker's model made, by job, in this run's folder's terms."""
    out = []
    for line in run.model_ledger.read_text().splitlines():
        entry = json.loads(line)
        if entry["kind"] == "tool_use":
            call = json.dumps(entry["input"], sort_keys=True).replace(str(run.root), "RUN")
            out.append((entry["worker"], entry["job"], entry["tool"], call))
    return sorted(out, key=lambda e: (e[0], str(e[1])))

"""`orch demo --changes` end to end with real agents of two kinds (Claude Code, Codex CLI), offline: an honest
fix lands after a Codex worker's review, a test-editing "fix" is REJECTED (scope), two changes to one line land
one after the other (a rebase, reviewed again), and the demo ends with the matrix and the `orch apply` command."""

from __future__ import annotations

import json
from pathlib import Path

import docker
import pytest

from orch.container.layout import LABEL_RUN
from orch.jobs.state import load_state
from orch.run.folder import RunFolder
from tests.dockertest import BASE, BUILD_TIMEOUT, new_name
from tests.helpers import orch

pytestmark = [pytest.mark.claude, pytest.mark.codex]


@pytest.fixture
def agents(claude_bin: Path, codex_bin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_CLAUDE_BIN", str(claude_bin))
    monkeypatch.setenv("ORCH_CODEX_BIN", str(codex_bin))


def test_changes_demo_lands_rejects_and_rebases(agents: None) -> None:
    """Locally: the writers and reviewers are the pinned binaries on this machine."""
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


@pytest.mark.docker
@pytest.mark.timeout(BUILD_TIMEOUT)
def test_changes_demo_in_a_container(
    image: str, names: list[str], engine: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same demo on the container backend, under strict isolation: each writer's worktree is its own uid's
    to write, and the changes land as they do locally."""
    monkeypatch.setenv("ORCH_BASE_IMAGE", BASE)
    name = new_name(names, "chdemo")
    result = orch("demo", "--changes", "--name", name)
    assert result.exit_code == 0, result.output
    assert "(docker)" in result.output
    run = RunFolder.for_name(name)
    report = json.loads(run.report_json.read_text())
    assert report["isolation"] == "strict"
    assert {r["task"]: r["status"] for r in report["changes"]} == {
        "mean": "LANDED",
        "cheat": "REJECTED",
        "note": "LANDED",
    }
    assert not engine.containers.list(all=True, filters={"label": f"{LABEL_RUN}={name}"}, ignore_removed=True)

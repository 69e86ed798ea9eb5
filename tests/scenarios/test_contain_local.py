"""Workers that try to exhaust what the others need, locally (real Claude Code, offline, on this machine's
tmux): one run carries a process bomb, a disk filler, a memory hog and a late writer beside an honest
finder. Each attacker's job fails, each attempt is flagged in events and the report, and the honest
finding is confirmed; the controller never stops."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from orch.jobs.state import JobStatus, load_state
from orch.run.events import Event
from orch.run.folder import RunFolder
from tests import caps_attacks
from tests.helpers import SAMPLE, orch
from tests.notify.receiver import Receiver

pytestmark = pytest.mark.claude

LIMITS = {"pids_per_worker": 256, "memory_per_worker": "1g", "disk_per_worker": "100m", "run_folder_max": "1g"}


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, claude_bin: Path) -> None:
    monkeypatch.setenv("ORCH_CLAUDE_BIN", str(claude_bin))
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_CONFIG_DIR"):
        monkeypatch.delenv(var, raising=False)


def assert_contained(run: RunFolder, output: str) -> None:
    """What both modes show: each attacker stopped and flagged, the honest finding confirmed, nothing lost."""
    lines = [json.loads(line) for line in run.events.read_text().splitlines()]
    over = {(e["worker"], e["data"]["cap"]) for e in lines if e["event"] == Event.OVER_CAP}
    assert {(2, "disk"), (3, "memory")} <= over, output
    assert {(1, "pids"), (1, "forks")} & over, output  # at its cap, or churning below it
    stopped = [e for e in lines if e["event"] == Event.LEFTOVERS_STOPPED and e["worker"] == 4]
    assert stopped and stopped[0]["data"]["job"] == "t4" and stopped[0]["data"]["killed"], lines
    assert not (run.outbox(4) / "late.log").exists()  # it never acted during t5
    state = load_state(run)
    for job in ("t1", "t2", "t3"):
        assert state.job(job).status is JobStatus.FAILED, (job, state.job(job))
        assert "stopped by the run's caps" in (state.job(job).failure or "")
    assert state.job("t5").status is JobStatus.DONE
    report = json.loads(run.report_json.read_text())
    assert {row["id"]: row["status"] for row in report["findings"]} == {"t5-F1": "CONFIRMED"}, output
    kinds = {(a["kind"], a["worker"]) for a in report["attempts"]}
    assert {("over-cap", 1), ("over-cap", 2), ("over-cap", 3), ("leftovers-stopped", 4)} <= kinds
    md = run.report_md.read_text()
    assert "## Isolation" in md and "over-cap" in md and "caps per worker: processes and threads 256" in md
    assert not list(run.outbox(2).glob("fill*.bin"))  # the filler's bytes are off the disk
    assert any(e["event"] == Event.FINISHED for e in lines)


def assert_told(receiver: Receiver) -> None:
    """A person heard of each cap broken (three at once: the rate limit holds back a fourth) and of the end."""
    posts = [p.json() for p in receiver.posts]
    over = [p["worker"] for p in posts if p["reason"] == "over-cap"]
    assert len(over) == 3 and set(over) <= {1, 2, 3}, posts
    assert all(p["action"] == f"orch attach {p['run']} {p['worker']} --write" for p in posts if p["worker"])
    assert posts[-1]["reason"] == "run-ended" and posts[-1]["text"].startswith("failed (exit 5)"), posts


def test_attackers_are_stopped_and_the_honest_work_completes_locally(
    offline: None, tmp_path: Path, receiver: Receiver
) -> None:
    workdir = tmp_path / "work"
    shutil.copytree(SAMPLE, workdir)
    spec = caps_attacks.spec(tmp_path / "fleet.yaml", workdir, real_bomb=False, limits=LIMITS)
    result = orch("run", spec, "--local", "--name", "contain", "--notify", receiver.url())
    run = RunFolder.for_name("contain")
    assert run.info().caps.pids == 256
    assert_contained(run, result.output)
    assert result.exit_code == 5, result.output  # the attackers' jobs failed; the run still reported
    assert_told(receiver)

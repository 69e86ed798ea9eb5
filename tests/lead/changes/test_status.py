"""How changes are shown (orch/lead/changes/status.py): `orch status`/`orch watch` lines and the report's
matrix."""

from __future__ import annotations

import pytest

from orch.jobs.changes import ChangeRow, ChangeStatus, RejectReason, ReviewCell
from orch.jobs.state import ChangeStage, Job, JobStatus
from orch.lead.changes import decisions
from orch.lead.changes.status import live_lines
from orch.report.changes import changes_text
from orch.spec.model import Role
from tests.lead.changes.test_decisions import _state

pytestmark = pytest.mark.pure  # starts nothing


def test_live_lines_follow_each_change() -> None:
    state = _state()
    (job,) = decisions.new_review_jobs(state, "fix", 1)
    job.worker, job.status = 3, JobStatus.RUNNING
    state.jobs.append(job)
    state.jobs.append(Job(id="fix.r1", role=Role.WRITER, task="fix", worker=1, rebase_of="fix"))
    assert live_lines(state) == [
        "change fix (fix, W1): review: fix.v1 running",
        "change fix.r1 (fix, W1): writing (pending, rebase of fix)",
    ]
    state.change("fix").stage, state.change("fix").reason = ChangeStage.REJECTED, "scope: test_calc.py"
    assert live_lines(state)[0] == "change fix (fix, W1): REJECTED: scope: test_calc.py"


def test_changes_matrix_text() -> None:
    rows = [
        ChangeRow(task="mean", writer=1, agent="claude", status=ChangeStatus.LANDED, diffstat="1 file changed",
                  reviews=[ReviewCell(job="mean.v1", reviewer=2, verdict="CONFIRMED")], rebases=1),
        ChangeRow(task="cheat", writer=2, agent="codex", status=ChangeStatus.REJECTED, reason=RejectReason.SCOPE,
                  detail="scope: test_calc.py"),
    ]  # fmt: skip
    text = changes_text(rows)
    assert "mean   W1 claude  LANDED" in text and "W2 CONFIRMED" in text
    assert "REJECTED (scope)" in text and "cheat: scope: test_calc.py" in text

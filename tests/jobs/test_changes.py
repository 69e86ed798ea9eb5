"""report.json's change rows (orch.jobs.changes), and the pure rule over them (orch.lead.changes.decisions)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orch.jobs.changes import ChangeRow, ChangeStatus, RejectReason, change_rows, write_row
from orch.lead.changes.decisions import every_writer_task_landed
from tests.lead.changes.gitfix import run_folder


def row(task: str, status: ChangeStatus) -> ChangeRow:
    return ChangeRow(task=task, writer=1, status=status)


@pytest.mark.parametrize(
    ("tasks", "rows", "landed"),
    [
        ([], [], True),
        (["t1"], [row("t1", ChangeStatus.LANDED)], True),
        (["t1", "t2"], [row("t1", ChangeStatus.LANDED)], False),
        (["t1"], [row("t1", ChangeStatus.REJECTED)], False),
        (["t1"], [row("t1", ChangeStatus.UNCHANGED)], True),  # completed: nothing to change
        (["t1"], [row("t1", ChangeStatus.FAILED)], False),
        (["t1"], [row("t1", ChangeStatus.CONFLICT), row("t1", ChangeStatus.LANDED)], True),
    ],
)
def test_every_writer_task_landed(tasks: list[str], rows: list[ChangeRow], landed: bool) -> None:
    assert every_writer_task_landed(tasks, rows) is landed


def test_rows_for_the_report(tmp_path: Path) -> None:
    run = run_folder()
    write_row(run, ChangeRow(task="t1", writer=2, status=ChangeStatus.REJECTED, reason=RejectReason.SCOPE))
    rows = change_rows(run, ["t1", "t2"])
    assert rows[0].reason is RejectReason.SCOPE
    assert rows[1].status is ChangeStatus.FAILED and rows[1].detail == "no change was taken"

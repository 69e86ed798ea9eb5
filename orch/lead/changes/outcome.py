"""Pure decisions about changes (fast, table-driven tests): a change's status from its gate and queue
results, and whether every writer task landed (the exit code rule, orch.lead.decisions, uses it)."""

from __future__ import annotations

from collections.abc import Sequence

from orch.lead.changes.records import ChangeRow, ChangeStatus
from orch.run.files import atomic_write
from orch.run.folder import RunFolder


def every_writer_task_landed(writer_tasks: Sequence[str], rows: Sequence[ChangeRow]) -> bool:
    """True when each writer task has a LANDED change, or completed without changing anything (UNCHANGED); a
    run with no writer task: True."""
    landed = {row.task for row in rows if row.status in (ChangeStatus.LANDED, ChangeStatus.UNCHANGED)}
    return all(task in landed for task in writer_tasks)


def write_row(run: RunFolder, row: ChangeRow) -> None:
    """Record how writer task `row.task`'s change stands (the controller flow calls it at every move)."""
    path = run.change_outcome(row.task)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, row.model_dump_json(indent=2) + "\n")


def change_rows(run: RunFolder, writer_tasks: Sequence[str]) -> list[ChangeRow]:
    """report.json's `changes`: each writer task's row as the flow last wrote it; a task with none is FAILED
    ("no change was taken")."""
    rows = []
    for task in writer_tasks:
        try:
            rows.append(ChangeRow.model_validate_json(run.change_outcome(task).read_text()))
        except (OSError, ValueError):
            rows.append(ChangeRow(task=task, writer=None, status=ChangeStatus.FAILED, detail="no change was taken"))
    return rows

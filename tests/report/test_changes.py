"""orch/report/changes.py: the changes' text matrix and report.md section, with a hostile writer's path names and
reasons (issue 30: a path with Markdown and escape sequences once put two lines into report.md's head)."""

from __future__ import annotations

import pytest
from markdown_it import MarkdownIt

from orch.jobs.changes import ChangeRow, ChangeStatus, RejectReason, ReviewCell
from orch.report.changes import changes_markdown, changes_text

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

NASTY = "evil`\n## Injected\x1b[2J|x.py"
ROW = ChangeRow(
    task="fix", writer=1, agent="claude", job="fix", status=ChangeStatus.REJECTED, reason=RejectReason.SCOPE,
    detail=f"{NASTY}: protected (tests/**) and not allowed by the task", files=[NASTY, "calc.py"],
    reviews=[ReviewCell(job="fix.rv1", reviewer=2, agent="codex", verdict="REFUTED", reason=NASTY)],
)  # fmt: skip


def test_the_text_matrix_is_a_line_per_task_and_its_detail() -> None:
    lines = changes_text([ROW]).split("\n")
    assert len(lines) == 3 and lines[0].startswith("task") and lines[1].startswith("fix")
    assert lines[2].startswith("  fix: evil` ## Injected\\x1b[2J|x.py: protected")  # shown, not acted on
    assert all(c.isprintable() for line in lines for c in line)


def test_a_path_name_adds_no_line_or_heading_to_report_md() -> None:
    section = changes_markdown([ROW])
    tokens = MarkdownIt("commonmark").enable("table").parse("\n".join(section))
    headings = [t for t in tokens if t.type == "heading_open"]
    assert len(headings) == 2  # "Changes" and the task's own
    assert not any(line.startswith("## Injected") for line in section)
    files = next(line for line in section if line.startswith("Files:"))
    assert files == "Files: ``evil` ## Injected\\x1b[2J|x.py``, `calc.py`  "

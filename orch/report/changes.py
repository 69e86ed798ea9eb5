"""The changes of a run as the report shows them: a text matrix (`orch demo --changes`, `orch report`), and the
report.md section (each change's diffstat, checks and reviews; report.html's is in orch/data/report/report.html)."""

from __future__ import annotations

from collections.abc import Sequence

from orch import escape
from orch.jobs.changes import ChangeRow
from orch.run.folder import RELATIVE

DETAIL_CHARS = 90


def change_status(row: ChangeRow) -> str:
    return row.status.value + (f" ({row.reason.value})" if row.reason else "")


def _checks(row: ChangeRow) -> str:
    if not row.checks:
        return "-"
    passed = sum(1 for c in row.checks if c.passed)
    return f"{passed}/{len(row.checks)} passed"


def _reviews(row: ChangeRow) -> str:
    return ", ".join(f"W{c.reviewer or '?'} {c.verdict}" for c in row.reviews) or "-"


def changes_text(rows: Sequence[ChangeRow]) -> str:
    """One line per writer task: task, writer, status, diffstat, checks, reviews, rebases."""
    if not rows:
        return ""
    head = ("task", "writer", "status", "diffstat", "checks", "reviews", "rebases")
    table = [head] + [
        tuple(
            escape.terminal(cell)
            for cell in (
                r.task,
                f"W{r.writer} {r.agent or ''}".strip() if r.writer else "-",
                change_status(r),
                r.diffstat or "-",
                _checks(r),
                _reviews(r),
                str(r.rebases),
            )
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in table]
    details = [f"  {escape.terminal(r.task)}: {escape.terminal(r.detail, DETAIL_CHARS)}" for r in rows if r.detail]
    return "\n".join(lines + details)


def changes_markdown(rows: Sequence[ChangeRow]) -> list[str]:
    if not rows:
        return []
    out = ["", "## Changes", "", "| task | writer | status | diffstat | checks | reviews | rebases | commit |"]
    out.append("|---|---|---|---|---|---|---|---|")
    for r in rows:
        writer = f"W{r.writer} {r.agent or ''}".strip() if r.writer else "-"
        cells = (r.task, writer, change_status(r), r.diffstat or "-", _checks(r), _reviews(r), str(r.rebases))
        commit = escape.markdown_code(r.commit[:12], cell=True) if r.commit else "-"
        out.append("| " + " | ".join(escape.markdown(c) for c in cells) + f" | {commit} |")
    for r in rows:
        out += ["", f"### {escape.markdown(r.task)}: {change_status(r)}", ""]
        if r.detail:
            out.append(f"{escape.markdown(r.detail)}  ")
        if r.files:
            out.append("Files: " + ", ".join(escape.markdown_code(f) for f in r.files) + "  ")
        out += [
            f"- check {escape.markdown_code(c.command)}: exit {c.exit_code}{' (timed out)' if c.timed_out else ''}"
            for c in r.checks
        ]
        out += [
            f"- review {escape.markdown(c.job)} by W{c.reviewer or '?'} ({escape.markdown(c.agent or '?')}): "
            f"{c.verdict}: {escape.markdown(c.reason)}"
            for c in r.reviews
        ]
        if r.job:
            out.append(f"- the patch: {escape.markdown_code(RELATIVE.change_patch(r.job).as_posix())}")
    return out

"""The changes of a run as the report shows them: a text matrix (`orch demo --changes`, `orch report`), and the
report.md section (each change's diffstat, checks and reviews; report.html's is in orch/data/report/report.html)."""

from __future__ import annotations

from collections.abc import Sequence

from orch.errors import OrchError
from orch.lead.changes import outcome, take
from orch.lead.changes.records import Change, ChangeRow, ChangeStatus, ChecksRecord, RejectReason, ReviewCell
from orch.lead.changes.repo import RunRepo
from orch.lead.jobs import ChangeBook, ChangeStage, ControllerState, JobStatus
from orch.lead.landing import WRITING_ROLES
from orch.lead.spec import FleetSpec
from orch.run.folder import RELATIVE, RunFolder
from orch.text import shorten

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
        (
            r.task,
            f"W{r.writer} {r.agent or ''}".strip() if r.writer else "-",
            change_status(r),
            r.diffstat or "-",
            _checks(r),
            _reviews(r),
            str(r.rebases),
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in table]
    details = [f"  {r.task}: {shorten(r.detail, DETAIL_CHARS)}" for r in rows if r.detail]
    return "\n".join(lines + details)


def changes_markdown(rows: Sequence[ChangeRow]) -> list[str]:
    if not rows:
        return []
    out = ["", "## Changes", "", "| task | writer | status | diffstat | checks | reviews | rebases | commit |"]
    out.append("|---|---|---|---|---|---|---|---|")
    for r in rows:
        writer = f"W{r.writer} {r.agent or ''}".strip() if r.writer else "-"
        commit = f"`{r.commit[:12]}`" if r.commit else "-"
        cells = (r.task, writer, change_status(r), r.diffstat or "-", _checks(r), _reviews(r), str(r.rebases), commit)
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    for r in rows:
        out += ["", f"### {r.task}: {change_status(r)}", ""]
        if r.detail:
            out.append(f"{r.detail}  ")
        if r.files:
            out.append("Files: " + ", ".join(f"`{f}`" for f in r.files) + "  ")
        out += [f"- check `{c.command}`: exit {c.exit_code}{' (timed out)' if c.timed_out else ''}" for c in r.checks]
        out += [
            f"- review {c.job} by W{c.reviewer or '?'} ({c.agent or '?'}): {c.verdict}: {c.reason}" for c in r.reviews
        ]
        if r.job:
            out.append(f"- the patch: `{RELATIVE.change_patch(r.job).as_posix()}`")
    return out


# --- live: `orch status`, `orch watch` (from the controller's books, as changes move) --------------
def live_lines(state: ControllerState) -> list[str]:
    """One line per change the controller took, in the order taken: where it is now (its reviews while in
    review, the queue's word once integrated), then the writer jobs still writing."""
    out = []
    for book in state.changes:
        reviewed = book.reviewed or book.id
        jobs = state.review_jobs(reviewed)
        verdicts = {r.job: r.report.verdict.value for r in state.reviews if r.change == reviewed}
        if book.stage is ChangeStage.REVIEW:
            where = "review: " + (
                ", ".join(f"{j.id} {verdicts.get(j.id) or j.status.value}" for j in jobs) or "opening"
            )
            if book.reviewed and book.reviewed != book.id:
                where += f" (kept from {book.reviewed})"
        else:
            where = book.stage.value + (f": {shorten(book.reason, DETAIL_CHARS)}" if book.reason else "")
        out.append(f"change {book.id} ({book.task}, W{book.writer}): {where}")
    taken = {b.id for b in state.changes}
    for job in state.jobs:
        if job.role in WRITING_ROLES and job.id not in taken and not job.terminal:
            again = f", rebase of {job.rebase_of}" if job.rebase_of else ""
            out.append(f"change {job.id} ({job.task}, W{job.worker or '?'}): writing ({job.status.value}{again})")
    return out


# --- report.json's rows, as the controller's books move -----------------------------------------
def write_row(run: RunFolder, spec: FleetSpec, state: ControllerState, book: ChangeBook) -> None:
    """report.json's row for the change's task, as it stands now (orch.lead.changes.outcome writes it)."""
    if book.stage is ChangeStage.REBASING:
        return  # the rebase job's change carries the task on
    repo = RunRepo.open(run)
    try:
        change: Change | None = take.load_change(repo, book.id)
    except (OSError, ValueError, OrchError):  # never taken (orch.lead.writing.Writing.untaken)
        change = None
    try:
        checks = ChecksRecord.model_validate_json(run.change_checks(book.id).read_text())
        results = checks.results
    except (OSError, ValueError):
        results = []
    agent_models = spec.agent_models()
    reviewed = book.reviewed or book.id
    cells = [
        ReviewCell(
            job=r.job,
            reviewer=r.reviewer,
            agent=agent_models[r.reviewer][0],
            verdict=r.report.verdict.value,
            reason=r.report.reason,
        )
        for r in state.reviews
        if r.change == reviewed
    ]
    cells += [
        ReviewCell(job=j.id, reviewer=j.worker, verdict="REFUSED", reason=j.failure or "")
        for j in state.review_jobs(reviewed)
        if j.status is JobStatus.FAILED
    ]
    status, reason = ROW_STATUS[book.stage], None
    if book.stage is ChangeStage.REJECTED and book.reason:
        reason = RejectReason(book.reason.split(":", 1)[0])
    row = ChangeRow(
        task=book.task,
        writer=book.writer,
        agent=agent_models[book.writer][0],
        job=book.id,
        status=status,
        reason=reason,
        detail=book.reason or "",
        diffstat=change.diffstat if change else "",
        files=change.files if change else [],
        checks=results,
        reviews=cells,
        rebases=book.rebases,
        commit=book.commit,
    )
    outcome.write_row(run, row)


ROW_STATUS = {
    # Not landed (yet): a run that ends here did not land it.
    ChangeStage.CHECKING: ChangeStatus.FAILED,
    ChangeStage.REVIEW: ChangeStatus.FAILED,
    ChangeStage.QUEUED: ChangeStatus.FAILED,
    ChangeStage.LANDED: ChangeStatus.LANDED,
    ChangeStage.REJECTED: ChangeStatus.REJECTED,
    ChangeStage.CONFLICT: ChangeStatus.CONFLICT,
    ChangeStage.FAILED: ChangeStatus.FAILED,
    ChangeStage.UNCHANGED: ChangeStatus.UNCHANGED,
    ChangeStage.REBASING: ChangeStatus.CONFLICT,
}

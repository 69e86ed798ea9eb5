"""Where each change of a run stands, as the controller's books move: the live lines of `orch status` and `orch
watch`, and report.json's row for each writer task (its report sections: orch.report.changes)."""

from __future__ import annotations

from orch.errors import OrchError
from orch.jobs import changes
from orch.jobs.changes import Change, ChangeRow, ChangeStatus, ChecksRecord, RejectReason, ReviewCell
from orch.jobs.state import ChangeBook, ChangeStage, ControllerState, JobStatus
from orch.lead.changes import take
from orch.lead.changes.decisions import WRITING_ROLES
from orch.lead.changes.repo import RunRepo
from orch.report.changes import DETAIL_CHARS
from orch.run.folder import RunFolder
from orch.spec.model import FleetSpec
from orch.text import shorten


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
    """report.json's row for the change's task, as it stands now (orch.jobs.changes writes it)."""
    if book.stage is ChangeStage.REBASING:
        return  # the rebase job's change carries the task on
    repo = RunRepo.open(run)
    try:
        change: Change | None = take.load_change(repo, book.id)
    except (OSError, ValueError, OrchError):  # never taken (orch.lead.changes.writing.Writing.untaken)
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
    changes.write_row(run, row)


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

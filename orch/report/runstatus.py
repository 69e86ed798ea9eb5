"""What `orch status` and `orch ls` add for an `orch run`, from its controller's books (controller.json): its
outcome and end, and each worker's jobs with what each came to. A run's folder alone answers, so a stopped run
reads the same as a running one, on any backend, with no tmux or engine asked."""

from __future__ import annotations

import datetime as dt

from orch.errors import OrchError
from orch.jobs.state import ControllerState, Job, JobStatus, load_state
from orch.run.events import Event
from orch.run.files import JsonlTail
from orch.run.folder import RELATIVE, RunFolder
from orch.run.records import ControllerEvent, RunStatus
from orch.run.statusview import RunOutcome, RunStatusView, WorkerJob
from orch.spec.model import Role


def _stamp(ts: float | None) -> dt.datetime | None:
    return dt.datetime.fromtimestamp(ts, dt.UTC) if ts is not None else None


def job_result(state: ControllerState, job: Job) -> str | None:
    """What a job came to, in a word or two: a finder's findings, a verdict, a review's verdict, a change's end."""
    if job.status is not JobStatus.DONE:
        return job.failure if job.status is JobStatus.FAILED else None
    if job.role is Role.VERIFIER:
        verdict = next((v for v in state.verdicts if v.job == job.id), None)
        return verdict.report.verdict.value if verdict else None
    if job.role is Role.REVIEWER:
        review = next((r for r in state.reviews if r.job == job.id), None)
        return review.report.verdict.value if review else None
    change = next((c for c in state.changes if c.id == job.id), None)
    if change is not None:
        return change.stage.value
    if job.role is Role.FINDER:
        found = sum(1 for f in state.findings if f.job == job.id)
        return f"{found} finding(s)"
    return None


def worker_jobs(run: RunFolder, state: ControllerState, n: int) -> list[WorkerJob]:
    out = []
    for job in state.jobs:
        if job.worker != n:
            continue
        kept = run.job_result(job.id)
        out.append(
            WorkerJob(
                job=job.id,
                role=job.role.value,
                status=job.status.value,
                result=job_result(state, job),
                result_file=RELATIVE.job_result(job.id).as_posix() if kept.is_file() else None,
            )
        )
    return out


def lead_state(run: RunFolder) -> ControllerState | None:
    """The run's controller books; None for a run no controller keeps (`orch up`), or of another version."""
    try:
        return load_state(run)
    except OrchError:
        return None


def killed_at(run: RunFolder) -> dt.datetime | None:
    """When an `orch up` run was killed (its last `killed` event)."""
    kills = [e for e in JsonlTail(run.events, ControllerEvent).records() if e.event is Event.KILLED]
    return kills[-1].ts if kills else None


def with_lead(view: RunStatusView, run: RunFolder) -> RunStatusView:
    """The view, with an `orch run`'s outcome, start and end, and each worker's jobs and why it is out."""
    state = lead_state(run)
    if state is None:
        stopped = view.status is RunStatus.STOPPED
        return view.model_copy(update={"finished": killed_at(run) if stopped else None})
    books = {b.n: b for b in state.workers}
    workers = [
        w.model_copy(update={"jobs": worker_jobs(run, state, w.worker), "out": books[w.worker].dead})
        if w.worker in books
        else w
        for w in view.workers
    ]
    outcome = state.outcome
    return view.model_copy(
        update={
            "workers": workers,
            "started": _stamp(state.started),
            "finished": _stamp(state.finished),
            "outcome": RunOutcome(status=outcome.status, exit_code=outcome.exit_code, reason=outcome.reason)
            if outcome
            else None,
        }
    )

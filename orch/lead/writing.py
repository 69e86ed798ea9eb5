"""The controller's part for changes: writers in their own worktrees, the gate, reviewers, the queue.

- Before a writer (writer, fixer, scribe) job's brief: a fresh worktree at the integration head in the
  worker's `worktrees_dir(n)`, and the worker's agent restarted there (a new session), so its model sees the
  worktree as its workdir. A review job gets a checkout of base + patch made by the controller, which the
  reviewer only reads, and its agent is moved there the same way; every other job moves it back.
- At a writer's done flag: the controller takes the change from a snapshot of the worktree
  (orch.lead.changes.take), runs the gate (checks, scope) and opens the review jobs.
- When the reviews settle (orch.lead.landing): approved changes go through the integration queue; CONFLICT
  and CHECKS_FAILED go back to the writer as a rebase job while it has rebases left.

What to do is decided in orch.lead.landing; this module does it and logs each step as an event.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from orch.fleet import launch
from orch.lead import landing
from orch.lead.changes import gate, queue, take
from orch.lead.changes.records import Change, CheckResult, Integration
from orch.lead.changes.repo import RunRepo
from orch.lead.desk import Part
from orch.lead.findings import CommandEvidence, Problem, ProblemKind, RanCommand, Verdict, VerdictReport
from orch.lead.jobs import AcceptedReview, ChangeBook, ChangeStage, Job
from orch.lead.landing import Next
from orch.run.events import Event
from orch.run.folder import UnsafeOutput, read_worker_file

SUMMARY_CHARS = 4000


class Writing(Part):
    # --- before a brief ------------------------------------------------------------------------
    def workdir_for(self, job: Job, n: int) -> Path:
        """Where `job` works: a writer's fresh worktree at the integration head, a reviewer's checkout of
        the change (both made here, once per job), else the run's workdir."""
        if job.workdir is not None:
            return Path(job.workdir)
        if job.role in landing.WRITING_ROLES:
            repo = RunRepo.open(self.run)
            head = repo.head()
            dest = self.run.worktrees_dir(n) / job.id
            shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir(parents=True)
            repo.checkout(head, dest)
            job.workdir, job.base = str(dest), head
            self.desk.save()
            self.desk.event(Event.WORKTREE_MADE, n, job=job.id, base=head, path=str(dest))
            return dest
        if job.change is not None:
            dest = self.run.change_dir(job.change) / "reviews" / f"{job.id}.tree"
            shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir(parents=True)
            change = self.state.change(job.change)
            RunRepo.open(self.run).checkout_change(change.base, self.run.change_dir(change.id) / "patch.diff", dest)
            _read_only(dest)
            job.workdir = str(dest)
            self.desk.save()
            return dest
        return self.desk.workdir

    def move(self, job: Job, n: int) -> None:
        """Restart worker n's agent in the job's workdir (a new session) when it is somewhere else."""
        where = self.workdir_for(job, n)
        book = self.state.book(n)
        if (book.cwd or str(self.desk.workdir)) == str(where):
            return
        book.restarted_at = time.time()
        launch.restart(self.run, n, None, self.spec.timeouts.boot, workdir=where, fresh=True)
        book.cwd = None if where == self.desk.workdir else str(where)
        self.desk.save()
        self.desk.event(Event.WORKER_MOVED, n, job=job.id, workdir=str(where))

    # --- a writer's done -----------------------------------------------------------------------
    def take(self, job: Job, n: int) -> None:
        """Take the change of accepted writer job `job` and put it through the gate."""
        assert job.task is not None and job.workdir is not None and job.base is not None
        repo = RunRepo.open(self.run)
        change = take.take_change(repo, Path(job.workdir), job.base, job.id, self._summary(job))
        checks_ok = True
        if change.refused or change.empty:
            results: list[CheckResult] = []
        else:
            results = gate.check_change(self.run, self.spec, repo, change)
            checks_ok = not gate.regressions(self.run, results)
        scope = [*change.refused, *gate.scope_violations(change, self.spec.protected(), self._allowed(job.task))]
        earlier = self.state.change(job.rebase_of) if job.rebase_of else None
        book = ChangeBook(
            id=job.id,
            task=job.task,
            writer=n,
            base=job.base,
            rebase_of=job.rebase_of,
            rebases=earlier.rebases + 1 if earlier else 0,
            fingerprint=change.patch_id or "",
            checks_ok=checks_ok,
            scope=scope,
        )
        book.reviewed = landing.reviewed_by(self.state, job.rebase_of, book.fingerprint) if book.fingerprint else None
        if change.empty and not change.refused:
            book.stage, book.reason = ChangeStage.FAILED, "the worktree has no change"
        self.state.changes.append(book)
        self.desk.save()
        self.desk.event(
            Event.CHANGE_TAKEN,
            n,
            job=job.id,
            task=job.task,
            diffstat=change.diffstat,
            files=change.files,
            checks_ok=checks_ok,
            scope=scope,
            kept_reviews=book.reviewed,
        )
        self.advance(book.id)

    def _summary(self, job: Job) -> str:
        path = self.run.job_result(job.id)
        try:
            return read_worker_file(path).decode(errors="replace")[:SUMMARY_CHARS]
        except (FileNotFoundError, UnsafeOutput, OSError):
            return ""

    def _allowed(self, task: str) -> list[str]:
        return list(self.desk.tasks[task].allow)

    # --- reviews -------------------------------------------------------------------------------
    def review_problems(self, report: VerdictReport, commands: list[RanCommand]) -> list[Problem]:
        """Beyond a verdict's own checks: an approval must cite a command the reviewer ran (in the ledger)."""
        ran = [ev for ev in report.evidence if isinstance(ev, CommandEvidence)]
        if report.verdict is Verdict.CONFIRMED and (not ran or not commands):
            detail = (
                "an approval needs a command you ran on this change during the job (a test, the changed code on "
                "an input), cited with its exit code"
            )
            return [Problem(kind=ProblemKind.NO_EVIDENCE, detail=detail)]
        return []

    def accept_review(self, job: Job, n: int, report: VerdictReport) -> None:
        assert job.change is not None
        self.state.reviews.append(AcceptedReview(job=job.id, change=job.change, reviewer=n, report=report))
        self.desk.save()
        self.desk.event(Event.REVIEW_ACCEPTED, n, job=job.id, change=job.change, verdict=report.verdict.value)

    def advance(self, change_id: str) -> None:
        """Move a change on as far as its gate, reviews and the queue allow (idempotent: a resumed controller
        calls it for every change)."""
        book = self.state.change(change_id)
        for other in self.state.changes:  # changes that keep this one's reviews move with it
            if other.reviewed == change_id and other.id != change_id:
                self._step(other)
        self._step(book)

    def _step(self, book: ChangeBook) -> None:
        step = landing.next_step(self.state, self.spec, book)
        if step is Next.WAIT:
            return
        if step is Next.REVIEW:
            new = landing.new_review_jobs(self.state, book.id, self.spec.changes.reviewers_per_change)
            self.state.jobs += new
            self.desk.save()
            self.desk.event(Event.REVIEW_OPENED, book.writer, change=book.id, jobs=[j.id for j in new])
            return
        if step is Next.REJECT:
            why = landing.gate(book.scope, book.checks_ok) or "review: " + self._review_reasons(book)
            self._end(book, ChangeStage.REJECTED, why)
            return
        self.integrate(book)

    def _review_reasons(self, book: ChangeBook) -> str:
        reviewed = book.reviewed or book.id
        said = [f"{r.report.verdict.value}: {r.report.reason}" for r in self.state.reviews if r.change == reviewed]
        return "; ".join(said) or "no valid review"

    # --- the queue -----------------------------------------------------------------------------
    def integrate(self, book: ChangeBook) -> None:
        repo = RunRepo.open(self.run)
        change = Change.model_validate_json((self.run.change_dir(book.id) / "change.json").read_text())
        result: Integration = queue.integrate(self.run, self.spec, repo, change, self._trailers(book))
        after = landing.after_queue(result.result.value, book.rebases, self.spec.changes.max_rebases)
        self.desk.event(
            Event.CHANGE_INTEGRATED, book.writer, change=book.id, result=result.result.value, detail=result.detail
        )
        if after.stage is ChangeStage.LANDED:
            book.commit = result.commit
        self._end(book, after.stage, result.detail or None)
        if after.rebase:
            job = Job(
                id=landing.rebase_job_id(book.task, book.rebases + 1),
                role=self.desk.tasks[book.task].role,
                task=book.task,
                pin=book.writer,
                rebase_of=book.id,
            )
            self.state.jobs.append(job)
            self.desk.save()
            self.desk.event(Event.REBASE_OPENED, book.writer, change=book.id, job=job.id, why=result.result.value)

    def _trailers(self, book: ChangeBook) -> dict[str, str]:
        reviewed = book.reviewed or book.id
        reviewers = [f"worker {r.reviewer}" for r in self.state.reviews if r.change == reviewed]
        return {
            "Orch-Writer": f"worker {book.writer} ({self.spec.kinds()[book.writer][0]})",
            "Orch-Reviewers": ", ".join(reviewers) or "none",
        }

    def _end(self, book: ChangeBook, stage: ChangeStage, reason: str | None) -> None:
        book.stage, book.reason = stage, reason
        self.desk.save()
        self.desk.event(
            Event.CHANGE_ENDED, book.writer, change=book.id, task=book.task, status=stage.value, reason=reason
        )

    def rebase_note(self, job: Job) -> str:
        """What a rebase job's brief adds: why the earlier change came back."""
        assert job.rebase_of is not None
        earlier = self.state.change(job.rebase_of)
        return (
            f"\n## This is a rebase of change {earlier.id}\n"
            f"Your earlier change for this task could not be integrated ({earlier.reason or 'conflict'}). "
            f"Its patch is `{self.run.change_dir(earlier.id) / 'patch.diff'}`. The worktree above is fresh, at the "
            "new integration head: make the change again on top of it.\n"
        )


def _read_only(tree: Path) -> None:
    """A reviewer's checkout: nobody writes it (the controller made it; the reviewer only reads)."""
    for path in [tree, *tree.rglob("*")]:
        if path.is_symlink():
            continue
        path.chmod(0o555 if path.is_dir() else 0o444)

"""The controller's part for changes: writers in their own worktrees, the gate, reviewers, the queue.

- Before a writer (writer, fixer, scribe) job's brief: a fresh worktree at the integration head in the
  worker's `worktrees_dir(n)`, and the worker's agent restarted there (a new session), so its model sees the
  worktree as its workdir. A review job gets a checkout of base + patch made by the controller, which the
  reviewer only reads, and its agent is moved there the same way; every other job moves it back.
- At a writer's done flag: the controller takes the change from a snapshot of the worktree
  (orch.lead.changes.take) before the job is marked done, one save recording both (`take`, then `taken`), and
  holds it against its scope; its checks run off the loop in the controller's
  check pool (orch.lead.changes.checkpool); when they end, the loop opens the review jobs.
- When the reviews settle (orch.lead.changes.decisions): approved changes enter the integration queue, which the pool
  works through one change at a time; CONFLICT and CHECKS_FAILED go back to the writer as a rebase job while
  it has rebases left.

What to do is decided in orch.lead.changes.decisions; this module does it and logs each step as an event. The pool's
threads only run checks and write their own files: every change to the controller's books happens here, on
the loop (`collect_checks`).
"""

from __future__ import annotations

import functools
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from orch.errors import OrchError
from orch.fleet import launch
from orch.jobs.changes import (
    Change,
    CheckResult,
    ChecksRecord,
    Integration,
)
from orch.jobs.findings import CommandEvidence, Problem, ProblemKind, RanCommand, Verdict, VerdictReport, runs_of
from orch.jobs.state import AcceptedReview, ChangeBook, ChangeStage, Job, JobStatus
from orch.lead.base import Part, PoolResult
from orch.lead.changes import agentfiles, decisions, gate, queue, status, take
from orch.lead.changes.checkpool import Ended
from orch.lead.changes.checkwatch import CheckLimits
from orch.lead.changes.decisions import CHECKED, Next, Work
from orch.lead.changes.grading import Grading
from orch.lead.changes.repo import RunRepo
from orch.lead.changes.scope import scope_violations
from orch.lead.changes.stopper import Stopper
from orch.run.events import Event
from orch.run.files import UnsafeOutput, read_worker_file
from orch.run.uids import worker_uid

SUMMARY_CHARS = 4000


class Writing(Part):
    # --- before a brief ------------------------------------------------------------------------
    def workdir_for(self, job: Job, n: int) -> Path:
        """Where `job` works: a writer's fresh worktree at the integration head, a reviewer's checkout of
        the change (both made here, once per job), else the run's workdir."""
        if job.workdir is not None:
            return Path(job.workdir)
        if job.role in decisions.WRITING_ROLES:
            repo = RunRepo.open(self.run)
            head = repo.head()
            root = _fresh_folder(self.worktree(job, n))
            if self.desk.confinement.own_uids:
                # In a container: the folder the controller's, writable by worker n's group (its folder of
                # worktrees is: orch.container.owners), the files worker n's own, and only worker n's.
                root.chmod(0o770)
                repo.checkout(head, root, owner=worker_uid(n))
            # Locally (a bubblewrap sandbox per worker, all of the user's uid) the worktree is the run's uid's:
            # only worker n's sandbox binds it writable, while its job lasts (orch.backends.local.bwrap.writable).
            else:
                repo.checkout(head, root)
            where = root / repo.subdir
            job.workdir, job.base = str(where), head
            self.desk.save()
            self.desk.event(Event.WORKTREE_MADE, n, job=job.id, base=head, path=str(where))
            return where
        if job.change is not None:
            repo = RunRepo.open(self.run)
            root = _fresh_folder(self.run.review_tree(job.change, job.id))
            tree = take.load_change(repo, job.change).tree
            assert tree is not None  # an empty or refused change is never reviewed
            repo.checkout(tree, root)  # the snapshot's tree: base + patch
            _read_only(root)
            where = root / repo.subdir
            job.workdir = str(where)
            self.desk.save()
            return where
        return self.desk.workdir

    def worktree(self, job: Job, n: int) -> Path:
        """The root of writer job `job`'s worktree (its workdir is the run's subdir in it)."""
        return self.run.worktrees_dir(n) / job.id

    def must_move(self, job: Job, n: int) -> bool:
        """Whether worker n's agent runs somewhere else than the job's workdir (made now if need be)."""
        return (self.state.book(n).cwd or str(self.desk.workdir)) != str(self.workdir_for(job, n))

    def move(self, job: Job, n: int, prompt: str) -> None:
        """Restart worker n's agent in the job's workdir (a new session), `prompt` (its brief's pointer) on its command
        line; nothing waits for its start (orch.lead.recovery.Recovery.restart_booting watches it)."""
        where = self.workdir_for(job, n)
        book = self.state.book(n)
        book.restarted_at, book.ended_session = time.time(), launch.last_session(self.run, n)
        launch.restart(self.run, n, self.desk.confinement, prompt, workdir=where, fresh=True, wait=False)
        book.cwd = None if where == self.desk.workdir else str(where)
        self.desk.save()
        self.desk.event(Event.WORKER_MOVED, n, job=job.id, workdir=str(where))

    # --- a writer's done -----------------------------------------------------------------------
    def take(self, job: Job, n: int) -> tuple[ChangeBook, Change]:
        """Take the change of writer job `job` (its output checked, not yet marked done): its files written,
        its book added to the state, unsaved (the caller saves it with the job's acceptance, then calls
        `taken`)."""
        assert job.task is not None and job.workdir is not None and job.base is not None
        repo = RunRepo.open(self.run)
        limits = self.spec.changes
        change = take.take_change(
            repo,
            self.worktree(job, n),
            job.base,
            job.id,
            self._summary(job),
            task=job.task,
            writer=n,
            agent=self.spec.agent_models()[n][0],
            max_file_bytes=limits.max_file_bytes,
            max_files=limits.max_files,
        )
        scope = scope_violations(change, self.grading, self._allowed(job.task))
        scope += agentfiles.violations(change, self._allowed(job.task), repo.subdir)  # whatever `protect:` says
        # A process the writer left behind could change the tree after the snapshot (which the change is taken
        # from, so it cannot alter this change): the attempt itself keeps the change out.
        # What it left when its job ended (stopped since), or what runs now.
        strays = self.desk.strays.get(n) or launch.stray_processes(
            self.run, n, self.desk.panes.get(n), self.desk.confinement, self.desk.processes
        )
        if strays:
            scope.append(f"{len(strays)} process(es) left running after the done flag: " + ", ".join(strays.values()))
        earlier = self.state.change(job.rebase_of) if job.rebase_of else None
        book = ChangeBook(
            id=job.id,
            task=job.task,
            writer=n,
            base=job.base,
            rebase_of=job.rebase_of,
            rebases=earlier.rebases + 1 if earlier else 0,
            fingerprint=change.patch_id or "",
            scope=scope,
        )
        book.reviewed = decisions.reviewed_by(self.state, job.rebase_of, book.fingerprint) if book.fingerprint else None
        if change.empty and not change.refused:
            # Set before the save (a resumed controller must not review it).
            book.stage, book.reason = decisions.unchanged(job.rebase_of is not None, self._requires_change(job.task))
        elif self.spec.checks and not scope:
            book.stage = ChangeStage.CHECKING  # the pool runs them (start_checks); out of scope, none are needed
        self.state.changes.append(book)
        return book, change

    def taken(self, book: ChangeBook, change: Change) -> None:
        """After the save that accepted its job: the change's row, its event, and its way through the gate."""
        self.write_row(book)
        n, scope = book.writer, book.scope
        self.desk.event(
            Event.CHANGE_TAKEN,
            n,
            job=book.id,
            task=book.task,
            diffstat=change.diffstat,
            files=change.files,
            checking=book.stage is ChangeStage.CHECKING,
            scope=scope,
            kept_reviews=book.reviewed,
        )
        if book.stage is ChangeStage.CHECKING:
            self.start_checks()
            return
        if book.stage is not ChangeStage.REVIEW:
            self.desk.event(
                Event.CHANGE_ENDED, n, change=book.id, task=book.task, status=book.stage.value, reason=book.reason
            )
            return
        self.advance(book.id)

    def untaken(self) -> None:
        """At a resume: a writer job saved as done with no change is what a controller that saved the two apart
        (before they became one save, in `Review.collect`) left when it died in between. Its worktree may have
        changed since (its worker, or what it left running, kept writing), so it is not taken now: that change
        FAILED, saying why, and nothing a writer did after its done flag can land through a resume."""
        for job in self.state.jobs:
            if job.role not in decisions.WRITING_ROLES or job.status is not JobStatus.DONE or job.task is None:
                continue
            if any(c.id == job.id for c in self.state.changes):
                continue
            earlier = self.state.change(job.rebase_of) if job.rebase_of else None
            book = ChangeBook(
                id=job.id,
                task=job.task,
                writer=job.worker or 0,
                base=job.base or "",
                rebase_of=job.rebase_of,
                rebases=earlier.rebases + 1 if earlier else 0,
            )
            self.state.changes.append(book)
            reason = (
                "its job was accepted but the controller stopped before it took the change; its worktree may "
                "have changed since, so it was not taken at the resume"
            )
            self._end(book, ChangeStage.FAILED, reason)

    def _requires_change(self, task: str) -> bool:
        """`change: required` (a fixer's default need, with confirmed findings, is the run's outcome's to judge)."""
        return self.desk.tasks[task].needs_change(confirmed_findings=False)

    # --- the checks, off the loop ---------------------------------------------------------------
    def start_checks(self) -> None:
        """Start what the pool has room for (orch.lead.changes.decisions.to_start): the queue's next change, then
        gates."""
        pool = self.desk.checks
        for change_id, work in decisions.to_start(self.state, pool.running(), pool.slots):
            book = self.state.change(change_id)
            try:
                job = self._gate_work(book) if work is Work.GATE else self._integration_work(book)
            except (OSError, ValueError, OrchError) as exc:  # its files are gone or unreadable: the change's end
                self._end(book, ChangeStage.FAILED, f"its {work.value} checks could not start: {exc}")
                continue
            if pool.start(change_id, work, job):
                self.desk.event(Event.CHECKS_STARTED, book.writer, change=book.id, work=work.value)

    def collect_checks(self) -> None:
        """Take in what the pool finished: a gate's checks open the change's reviews (or reject it), an
        integration lands the change or sends it back to its writer."""
        for ended in self.desk.checks.take({work.value for work in Work}):
            book = self.state.change(ended.change)
            if book.stage not in CHECKED:
                continue
            if ended.error is not None:
                self.desk.event(Event.CHECKS_ENDED, book.writer, change=book.id, work=ended.work, error=ended.error)
                self._end(book, ChangeStage.FAILED, f"its {ended.work} checks could not run: {ended.error}")
                continue
            if ended.work == Work.GATE:
                self._gate_ended(book, ended)
            else:
                self._integration_ended(book, ended)
        self.start_checks()

    def stop_leftover_checks(self) -> None:
        """On (re)start, before any check: a killed controller's checks still running (a container's checks' uid,
        which its death does not reach) killed, so a check never runs twice side by side."""
        if self.spec.checks and (left := gate.stop_leftover_checks(self.desk.checks_host)):
            self.desk.event(Event.CHECKS_LEFTOVER_STOPPED, pids=left)

    def stop_checks(self, ended_run: bool) -> None:
        """Stop the pool (every running check killed). When the run ended (not the controller alone), a change
        still being checked or queued did not land: FAILED, saying so."""
        self.desk.checks.close()
        if not ended_run:
            return  # a resumed controller checks them again
        for book in self.state.changes:
            if book.stage in CHECKED:
                self._end(book, ChangeStage.FAILED, f"the run ended before its checks did ({book.stage.value})")

    def _gate_work(self, book: ChangeBook) -> Callable[[Stopper], ChecksRecord | Integration]:
        """The gate's checks on the change's tree, as the pool runs them (what they need read here, on the loop)."""
        repo, limits, grading = RunRepo.open(self.run), CheckLimits.of(self.spec), self.grading
        change, checks, baseline = take.load_change(repo, book.id), list(self.spec.checks), self.baseline()
        return lambda stop: gate.gate_checks(
            repo, change, checks, baseline, limits=limits, grading=grading, stopper=stop
        )  # fmt: skip

    def _gate_ended(self, book: ChangeBook, ended: Ended[PoolResult]) -> None:
        record = ended.value
        assert isinstance(record, ChecksRecord)
        book.checks_ok = not record.regressions
        book.stage = ChangeStage.REVIEW
        self.desk.save()
        self.write_row(book)
        self.desk.event(
            Event.CHECKS_ENDED, book.writer, change=book.id, work=ended.work, regressions=record.regressions
        )
        self.advance(book.id)

    def baseline(self) -> list[CheckResult]:
        """The checks' results on the base (base.checks.json, made before the run or at the controller's start)."""
        try:
            return ChecksRecord.model_validate_json(self.run.base_checks.read_text()).results
        except (OSError, ValueError):
            return []

    def _summary(self, job: Job) -> str:
        path = self.run.job_result(job.id)
        try:
            return read_worker_file(path).decode(errors="replace")[:SUMMARY_CHARS]
        except (FileNotFoundError, UnsafeOutput, OSError):
            return ""

    @functools.cached_property
    def grading(self) -> Grading:
        """What grades a change in this run (orch.lead.changes.grading): the protected globs in force and the base's
        files the checks name, read once."""
        return Grading.of(RunRepo.open(self.run), self.spec.protected(), self.spec.checks)

    def _allowed(self, task: str) -> list[str]:
        return list(self.desk.tasks[task].allow)

    # --- reviews -------------------------------------------------------------------------------
    def review_problems(self, report: VerdictReport, commands: list[RanCommand]) -> list[Problem]:
        """Beyond a verdict's own checks: an approval must cite a command the reviewer ran (in the ledger: orch's own
        run of the checks does not count)."""
        ran = [ev for ev in report.evidence if isinstance(ev, CommandEvidence) and runs_of(ev.command, commands)]
        if report.verdict is Verdict.CONFIRMED and not ran:
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
        step = decisions.next_step(self.state, self.spec, book)
        if step is Next.WAIT:
            return
        if step is Next.REVIEW:
            new = decisions.new_review_jobs(self.state, book.id, self.spec.changes.reviewers_per_change)
            self.state.jobs += new
            self.desk.save()
            self.desk.event(Event.REVIEW_OPENED, book.writer, change=book.id, jobs=[j.id for j in new])
            return
        if step is Next.REJECT:
            why = decisions.gate(book.scope, book.checks_ok) or "review: " + self._review_reasons(book)
            self._end(book, ChangeStage.REJECTED, why)
            return
        self.enqueue(book)

    def _review_reasons(self, book: ChangeBook) -> str:
        reviewed = book.reviewed or book.id
        said = [f"{r.report.verdict.value}: {r.report.reason}" for r in self.state.reviews if r.change == reviewed]
        return "; ".join(said) or "no valid review"

    # --- the queue -----------------------------------------------------------------------------
    def enqueue(self, book: ChangeBook) -> None:
        """An approved change enters the integration queue (the pool integrates it in its turn)."""
        ahead = sum(1 for c in self.state.changes if c.stage is ChangeStage.QUEUED)
        book.stage, book.queued_at = ChangeStage.QUEUED, time.time()
        self.desk.save()
        self.desk.event(Event.CHANGE_QUEUED, book.writer, change=book.id, ahead=ahead)
        self.start_checks()

    def _integration_work(self, book: ChangeBook) -> Callable[[Stopper], ChecksRecord | Integration]:
        """The change onto the integration head, the checks on the result, the branch moved (in the pool)."""
        repo, limits, task = RunRepo.open(self.run), CheckLimits.of(self.spec), self.desk.tasks[book.task]
        change, checks, baseline = take.load_change(repo, book.id), list(self.spec.checks), self.baseline()
        reviewers, title, grading = self._reviewers(book), task.title or task.goal.splitlines()[0], self.grading
        return lambda stop: queue.integrate(
            repo, change, checks, baseline, reviewers=reviewers, task_title=title, limits=limits, grading=grading,
            stopper=stop,
        )  # fmt: skip

    def _integration_ended(self, book: ChangeBook, ended: Ended[PoolResult]) -> None:
        result = ended.value
        assert isinstance(result, Integration)
        self.desk.event(Event.CHECKS_ENDED, book.writer, change=book.id, work=ended.work, result=result.result.value)
        after = decisions.after_queue(result.result.value, book.rebases, self.spec.changes.max_rebases)
        self.desk.event(
            Event.CHANGE_INTEGRATED, book.writer, change=book.id, result=result.result.value, detail=result.detail
        )
        if after.stage is ChangeStage.LANDED:
            book.commit = result.commit
        self._end(book, after.stage, result.detail or None)
        if after.rebase:
            job = Job(
                id=decisions.rebase_job_id(book.task, book.rebases + 1),
                role=self.desk.tasks[book.task].role,
                task=book.task,
                pin=book.writer,
                rebase_of=book.id,
            )
            self.state.jobs.append(job)
            self.desk.save()
            self.desk.event(Event.REBASE_OPENED, book.writer, change=book.id, job=job.id, why=result.result.value)

    def _reviewers(self, book: ChangeBook) -> list[str]:
        """Who approved it, as `agent-2 (codex)`."""
        reviewed = book.reviewed or book.id
        agent_models = self.spec.agent_models()
        return [
            f"agent-{r.reviewer} ({agent_models[r.reviewer][0]})"
            for r in self.state.reviews
            if r.change == reviewed and r.report.verdict is Verdict.CONFIRMED
        ]

    def _end(self, book: ChangeBook, stage: ChangeStage, reason: str | None) -> None:
        book.stage, book.reason = stage, reason
        self.desk.save()
        self.write_row(book)
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
            f"Its patch is `{self.run.change_patch(earlier.id)}`. The worktree above is fresh, at the "
            "new integration head: make the change again on top of it.\n"
        )

    def write_row(self, book: ChangeBook) -> None:
        """report.json's row for the change's task, as it stands now (orch.lead.changes.status.write_row)."""
        status.write_row(self.run, self.spec, self.state, book)


def _fresh_folder(root: Path) -> Path:
    """An empty folder at `root` for a job (a folder left there removed first). A file, a link or anything else
    in its place (planted by a worker, left by a crash) is an OrchError, which fails that job cleanly: never
    followed, never a crash of the controller."""
    if root.is_dir() and not root.is_symlink():
        shutil.rmtree(root, ignore_errors=True)
    try:
        root.mkdir(parents=True)
    except OSError as exc:
        raise OrchError(f"cannot make the job's folder {root}: {exc.strerror}") from None
    return root


def _read_only(tree: Path) -> None:
    """A reviewer's checkout: nobody writes it (the controller made it; the reviewer only reads)."""
    for path in [tree, *tree.rglob("*")]:
        if path.is_symlink():
            continue
        path.chmod(0o555 if path.is_dir() else 0o444)

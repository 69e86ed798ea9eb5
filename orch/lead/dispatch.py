"""Handing out jobs: pick a free worker for each pending job (orch.lead.decisions.pick), clear what an
earlier job left, write and deliver the briefs, and settle a brief caught mid-send."""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path

from orch.errors import OrchError
from orch.fleet import talk
from orch.jobs.state import FindingStatus, Job, JobStatus
from orch.jobs.verification import finding_status
from orch.lead import briefs, decisions, verdictwriter
from orch.lead.acceptance import Review
from orch.lead.base import Desk, Part
from orch.lead.changes import briefs as change_briefs
from orch.lead.changes import decisions as change_decisions
from orch.run.events import Event
from orch.run.records import WorkerState
from orch.run.workerprotocol import pointer_text
from orch.spec.model import Role


class Dispatch(Part):
    def __init__(self, desk: Desk, review: Review) -> None:
        super().__init__(desk)
        self.review = review

    def dispatch(self) -> None:
        free = [
            b.n
            for b in self.state.workers
            if decisions.awaits_job(b) and self.desk.worker_state(b.n)[0] is WorkerState.IDLE
        ]
        if not free:
            return
        alive = self.desk.alive()
        starting: list[tuple[Job, int]] = []
        for job in [j for j in self.state.jobs if j.status is JobStatus.PENDING]:
            if not free:
                break
            choice = decisions.pick(self.state, self.spec, job, free, alive, self.state.replay)
            if choice.fail is not None:
                self.review.fail(job, choice.fail)
            if choice.worker is None:
                continue
            free.remove(choice.worker)
            self.assign(job, choice.worker)
            if self.move(job, choice.worker) is False:
                starting.append((job, choice.worker))
        self.send_briefs(starting)

    def move(self, job: Job, n: int) -> bool | None:
        """Put worker n's agent in the job's workdir (a writer's worktree, a reviewer's checkout, else the run's
        workdir): when it is elsewhere, its agent restarted there with the brief's pointer on its command line
        (True: briefed; nothing waits for it to boot). False: it is there already, to be briefed as usual; None:
        the job failed, it could not be done."""
        writing = self.review.writing
        try:
            if not writing.must_move(job, n):
                return False
            talk.write_brief(self.run, n, self.brief_for(job, n))
            self.sending(job, n)
            self.desk.save()  # a controller killed now finds it SENDING, and settles it from the hooks
            writing.move(job, n, pointer_text(self.run, n))
        except OrchError as exc:
            self.review.fail(job, f"could not start worker {n} in the job's workdir: {exc.one_line()}")
            return None
        self.sent(job, n, on_command_line=True)
        self.desk.save()
        return True

    def assign(self, job: Job, n: int) -> None:
        if job.role is Role.VERIFIER:
            assert job.finding is not None
            if self.state.finding(job.finding).finder == n:  # decisions.pick never does this
                raise RuntimeError(f"refusing to let worker {n} verify its own finding {job.finding}")
        if job.role is Role.REVIEWER:
            assert job.change is not None
            if n in change_decisions.writers_of(self.state, job.change):  # decisions.pick never does this
                raise RuntimeError(f"refusing to let worker {n} review its own change {job.change}")
        self.review.stop_leftovers(n, job.id)  # started after its last job ended: none may see this one
        self.clear_leftovers(job, n)
        job.worker = n
        self.state.book(n).job = job.id
        self.desk.gateway_job(n, job.id)
        self.desk.event(Event.ASSIGNED, n, job=job.id, role=job.role.value, finding=job.finding, round=job.round)

    def clear_leftovers(self, job: Job, n: int) -> None:
        """A worker starts a job with no done flag, result or output file lying around."""
        output = self.output_file(job, n)
        stale = self.run.clear_outbox(n, [p for p in (self.run.done(n), self.run.result(n), output) if p is not None])
        if stale:
            self.desk.event(Event.STALE_CLEARED, n, job=job.id, files=[str(p) for p in stale])

    def output_file(self, job: Job, n: int) -> Path | None:
        if job.role is Role.FINDER:
            return self.run.outbox_findings(n, job.id)
        if job.role in (Role.VERIFIER, Role.REVIEWER):
            return self.run.outbox_verdict(n, job.id)
        return None

    def send_briefs(self, starting: list[tuple[Job, int]]) -> None:
        """Deliver the briefs of one dispatch round side by side (talk.brief_many)."""
        if not starting:
            return
        texts = {n: self.brief_for(job, n) for job, n in starting}
        for job, n in starting:
            self.sending(job, n)
        self.desk.save()
        errors = talk.brief_many(self.run, texts)
        for job, n in starting:
            exc = errors[n]
            if exc is not None:
                self.desk.event(Event.BRIEF_FAILED, n, job=job.id, error=exc.one_line())
                if decisions.send_given_up(job):
                    self.review.fail(job, f"the brief could not be delivered: {exc.one_line()}")
                continue
            self.sent(job, n)
        self.desk.save()

    def sending(self, job: Job, n: int) -> None:
        job.status = JobStatus.SENDING
        job.sent_at = time.time()
        job.send_attempts += 1
        self.desk.event(Event.BRIEF_SENDING, n, job=job.id, attempt=job.send_attempts)

    def sent(self, job: Job, n: int, **data: bool) -> None:
        job.status = JobStatus.RUNNING
        job.last_prompt_at = time.time()
        self.archive_brief(job, n)
        self.desk.event(Event.BRIEF_SENT, n, job=job.id, **data)

    def settle_send(self, job: Job, n: int, resumed: bool) -> None:
        """A brief marked SENDING: if the worker's hooks show the pointer arrived, it is RUNNING; else send."""
        if decisions.brief_delivered(self.run.hook_events(n), job.sent_at or 0.0, str(self.run.task(n))):
            job.status = JobStatus.RUNNING
            job.last_prompt_at = time.time()
            self.desk.save()
            self.archive_brief(job, n)
            self.desk.event(Event.BRIEF_SENT, n, job=job.id, confirmed_from_hooks=True, resumed=resumed)
            return
        self.desk.event(Event.BRIEF_NOT_DELIVERED, n, job=job.id, resumed=resumed)
        self.send_briefs([(job, n)])

    def archive_brief(self, job: Job, n: int) -> None:
        self.run.jobs_dir.mkdir(exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            shutil.copyfile(self.run.task(n), self.run.job_brief(job.id))

    def brief_for(self, job: Job, n: int) -> str:
        workers = len(self.state.workers)
        workdir = self.desk.workdir
        if job.role is Role.VERIFIER:
            assert job.finding is not None
            values = briefs.verify_values(self.run, self.state, job, n, workdir, workers)
            item = self.state.finding(job.finding)
            record = str(self.run.reproduction(item.id)) if item.finding.reproduce else verdictwriter.NO_RECORD
            steps = briefs.offline_verify_steps(self.spec, item.finding, values, record)
            return briefs.brief_text(self.spec, Role.VERIFIER, values, steps)
        if job.role is Role.REVIEWER:
            assert job.change is not None and job.workdir is not None
            values = change_briefs.review_values(self.run, self.state, self.spec, job, n, Path(job.workdir), workers)
            steps = change_briefs.offline_review_steps(self.spec, self.run, self.state.change(job.change), values)
            return briefs.brief_text(self.spec, Role.REVIEWER, values, steps)
        assert job.task is not None
        task = self.desk.tasks[job.task]
        if job.role in change_decisions.WRITING_ROLES and job.workdir is not None:
            workdir = Path(job.workdir)
        confirmed = [
            f for f in self.state.findings if finding_status(self.state, self.spec, f.id) is FindingStatus.CONFIRMED
        ]
        values = briefs.task_values(self.run, self.state, job, task, n, workdir, workers, confirmed)
        if job.role in change_decisions.WRITING_ROLES:
            values["checks"] = change_briefs.checks_list(self.spec.checks)
        steps = briefs.offline_task_steps(self.spec, task, values)
        text = briefs.brief_text(self.spec, task.role, values, steps)
        return text + (self.review.writing.rebase_note(job) if job.rebase_of else "")

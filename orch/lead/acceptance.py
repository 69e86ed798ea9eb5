"""How a job ends: its output checked and accepted (findings open verification jobs, verdicts may open
the confirm round), or rejected with what is wrong (up to a limit), or the job failed or cancelled."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from orch.fleet import launch
from orch.gateway.link import has_gateway
from orch.jobs.findings import (
    Finding,
    Problem,
    ProblemKind,
    RanCommand,
    check_findings,
    check_verdict,
    denied_writes,
    hook_commands,
    hook_denied_writes,
    ledger_commands,
    result_problems,
)
from orch.jobs.state import AcceptedFinding, AcceptedVerdict, Flag, Job, JobStatus, Stance
from orch.jobs.verification import (
    CONFIRM_ROUND,
    VERIFY_ROUND,
    eligible,
    first_stance,
    needs_confirm_round,
    new_verification_jobs,
)
from orch.lead import briefs, decisions, treecheck
from orch.lead.base import CORRECTION, Desk, Part
from orch.lead.changes.decisions import WRITING_ROLES
from orch.lead.changes.writing import Writing
from orch.run.events import Event
from orch.run.files import UnsafeOutput, atomic_write, read_worker_file
from orch.run.records import Isolation
from orch.spec.model import Role


class Review(Part):
    def __init__(self, desk: Desk) -> None:
        super().__init__(desk)
        self.writing = Writing(desk)

    def collect(self, job: Job, n: int) -> None:
        """Worker n's done flag is there: check its output for `job`, accept it or tell it what is wrong."""
        token = self.state.token(job.id)
        window = self.spec.verification.evidence_window
        workdir = self.desk.workdir
        if job.role is Role.FINDER:
            findings, problems = check_findings(self.run, job.id, token, n, workdir, window)
            if findings is not None and (problems := self.tree_problems()):
                findings = None
            if findings is not None:
                # What the controller validated, in its own file: the worker's outbox copy can change later.
                self.run.findings_dir.mkdir(exist_ok=True)
                atomic_write(self.run.findings_file(job.id), findings.model_dump_json(indent=2) + "\n")
                self.accept(job, n)
                self.add_findings(job, n, findings.findings)
                self.finish_job(job, n)
                return
        elif job.role is Role.VERIFIER:
            assert job.finding is not None
            commands = self.ran_commands(job, n)
            verdict, problems = check_verdict(self.run, job.id, token, job.finding, n, workdir, window, commands)
            if verdict is not None and (problems := self.tree_problems()):
                verdict = None
            if verdict is not None:
                assert job.stance is not None
                self.run.verdicts_dir.mkdir(exist_ok=True)
                atomic_write(self.run.verdict_file(job.id), verdict.model_dump_json(indent=2) + "\n")
                self.accept(job, n)
                self.state.verdicts.append(
                    AcceptedVerdict(
                        job=job.id, finding=job.finding, verifier=n, round=job.round, stance=job.stance, report=verdict
                    )
                )
                self.finish_job(job, n)
                self.desk.event(
                    Event.VERDICT_ACCEPTED, n, job=job.id, finding=job.finding, verdict=verdict.verdict.value
                )
                self.advance(job.finding)
                return
        elif job.role is Role.REVIEWER:
            assert job.change is not None and job.workdir is not None
            commands = self.ran_commands(job, n)
            checkout = Path(job.workdir)
            verdict, problems = check_verdict(self.run, job.id, token, job.change, n, checkout, window, commands)
            if verdict is not None and (problems := self.writing.review_problems(verdict, commands)):
                verdict = None
            if verdict is not None:
                self.run.verdicts_dir.mkdir(exist_ok=True)
                atomic_write(self.run.verdict_file(job.id), verdict.model_dump_json(indent=2) + "\n")
                self.accept(job, n)
                self.finish_job(job, n)
                self.writing.accept_review(job, n, verdict)
                self.writing.advance(job.change)
                return
        elif job.role in WRITING_ROLES:
            problems = result_problems(self.run, n)
            if not problems:
                # The change is taken before the job is marked done, and one save records both: a controller
                # killed before it resumes with the job still running and its done flag still there (collected
                # and taken again), never with the job done and its change lost.
                self.observe(job, n)  # its leftovers stopped before the snapshot
                self.keep_result(job, n)  # the change's summary
                book, change = self.writing.take(job, n)
                self.accept(job, n)
                self.desk.save()
                self.desk.event(Event.JOB_ACCEPTED, n, job=job.id, role=job.role.value)
                self.run.clear_outbox(n, [self.run.result(n), self.run.done(n)])
                self.writing.taken(book, change)
                return
        else:
            problems = result_problems(self.run, n)
            if not problems:
                self.accept(job, n)
                self.finish_job(job, n)
                return
        self.reject(job, n, problems)

    def tree_problems(self) -> list[Problem]:
        """Under shared isolation (nothing keeps the tree read-only): files of the tree under audit that changed
        since the run began."""
        if self.desk.info.isolation is Isolation.STRICT:  # writers write their own worktrees, never this tree
            return []
        edited = treecheck.changed(self.run, self.desk.workdir)
        if not edited:
            return []
        detail = (
            f"the tree under audit changed during the run ({', '.join(edited)}): evidence checked against an "
            "edited tree proves nothing. Undo your changes to those files and submit again"
        )
        return [Problem(kind=ProblemKind.TREE_CHANGED, detail=detail)]

    def ran_commands(self, job: Job, n: int) -> list[RanCommand]:
        """The shell commands worker n ran on the job: from the gateway's ledger, which workers cannot write; a run
        without a gateway has only the worker's own hook log (the report says so)."""
        since = job.sent_at or 0.0
        shell = launch.adapter_of(self.desk.info, n).facts.shell  # the tool its agent runs shell with
        if has_gateway(self.run):
            return ledger_commands(self.desk.gateway.ledger(), n, job.id, since, shell)
        return hook_commands(self.run.hook_events(n), since, shell)

    def accept(self, job: Job, n: int) -> None:
        job.status = JobStatus.DONE
        job.ended_at = time.time()
        job.problems = []
        self.state.book(n).job = None
        self.desk.gateway_job(n, None)

    def finish_job(self, job: Job, n: int) -> None:
        """Commit (save), then move the worker's result aside so its next job starts clean."""
        self.desk.save()
        self.desk.event(Event.JOB_ACCEPTED, n, job=job.id, role=job.role.value)
        self.archive_result(job, n)

    def observe(self, job: Job, n: int) -> None:
        """What worker n did beyond its outbox during `job`, logged where the report shows it: writes the
        system refused it (its tool results in the gateway's ledger) and processes it left running."""
        shell, since = launch.adapter_of(self.desk.info, n).facts.shell, job.sent_at or 0.0
        denied = denied_writes(self.desk.gateway.ledger(), n, job.id, since, shell) if has_gateway(self.run) else []
        # Its hook log adds what its agent's own results showed refused (an agent with no model has no ledger).
        denied += [c for c in hook_denied_writes(self.run.hook_events(n), since, shell) if c not in denied]
        if denied:
            self.desk.event(Event.WRITE_DENIED, n, job=job.id, commands=denied)
        self.stop_leftovers(n, job.id)

    def stop_leftovers(self, n: int, job: str | None) -> None:
        """Worker n's processes outside its agent, listed and then stopped: nothing a job left running may
        act during the next one."""
        # The pane as it is now: the loop's view may be older than a restart, whose new agent is no stray.
        pane = (self.desk.server.panes_if_running() or {}).get(n)
        strays = launch.stray_processes(self.run, n, pane, self.desk.confinement, self.desk.processes)
        self.desk.strays[n] = strays
        if not strays:
            return
        self.desk.event(Event.LEFTOVER_PROCESSES, n, job=job, processes={str(k): v for k, v in strays.items()})
        if pane is None:  # its tmux server died: the fleet's relaunch waits for them to end
            return
        stopped = launch.stop_strays(self.run, n, pane, self.desk.confinement, self.desk.processes)
        self.desk.event(Event.LEFTOVERS_STOPPED, n, job=job, killed=stopped.killed, survived=stopped.survived)

    def archive_result(self, job: Job, n: int) -> None:
        self.observe(job, n)
        self.keep_result(job, n)
        self.run.clear_outbox(n, [self.run.result(n), self.run.done(n)])

    def keep_result(self, job: Job, n: int) -> None:
        """Worker n's result, copied to the job's own file (its outbox is cleared for the next job)."""
        self.run.jobs_dir.mkdir(exist_ok=True)
        with contextlib.suppress(FileNotFoundError, UnsafeOutput):
            atomic_write(self.run.job_result(job.id), read_worker_file(self.run.result(n)))

    def add_findings(self, job: Job, n: int, findings: list[Finding]) -> None:
        assert job.task is not None
        stance = first_stance(self.spec)
        for finding in findings:
            item = AcceptedFinding(id=f"{job.task}-{finding.id}", job=job.id, task=job.task, finder=n, finding=finding)
            self.state.findings.append(item)
            new = new_verification_jobs(
                self.state, item.id, VERIFY_ROUND, stance, self.spec.verification.verifiers_per_finding
            )
            self.state.jobs += new
            self.desk.event(Event.FINDING_ACCEPTED, n, finding=item.id, claim=finding.claim, jobs=[j.id for j in new])
        self.desk.save()

    def advance(self, finding: str) -> None:
        """After a verification job ends: open round 3 for a survivor of round 2."""
        if needs_confirm_round(self.state, self.spec, finding):
            new = new_verification_jobs(
                self.state, finding, CONFIRM_ROUND, Stance.CONFIRM, self.spec.verification.verifiers_per_finding
            )
            self.state.jobs += new
            self.desk.save()
            self.desk.event(Event.CONFIRM_ROUND, finding=finding, jobs=[j.id for j in new])

    def reject(self, job: Job, n: int, problems: list[Problem]) -> None:
        self.state.flags.append(Flag(ts=time.time(), worker=n, job=job.id, role=job.role, problems=problems))
        job.problems = problems
        self.desk.event(Event.OUTPUT_REJECTED, n, job=job.id, problems=[p.model_dump(mode="json") for p in problems])
        limits = self.spec.limits
        if not decisions.may_correct(job, limits):
            self.fail(job, f"output still not acceptable after {job.corrections} correction(s): {problems[0].detail}")
            return
        job.corrections += 1
        self.desk.save()
        self.run.clear_outbox(n, [self.run.done(n)])
        text = briefs.correction_text(self.run, job, n, problems, job.corrections, limits.max_corrections)
        self.desk.tell(job, n, text, CORRECTION)

    def fail(self, job: Job, reason: str) -> None:
        job.status = JobStatus.FAILED
        job.failure = reason
        job.ended_at = time.time()
        n = job.worker
        if n is not None and self.state.book(n).job == job.id:
            self.state.book(n).job = None
            self.desk.gateway_job(n, None)
        self.desk.save()
        if n is not None:
            self.archive_result(job, n)
        self.desk.event(Event.JOB_FAILED, job.worker, job=job.id, reason=reason)
        if job.role is Role.VERIFIER and job.finding is not None:
            self.replace_verifier(job)
            self.advance(job.finding)
        if job.role is Role.REVIEWER and job.change is not None:
            self.writing.advance(job.change)

    def replace_verifier(self, job: Job) -> None:
        """A verification job that failed gets another verifier if one may still take it."""
        assert job.finding is not None and job.stance is not None
        # Eligible for a new job on this finding and round: the failed job's worker is not (it had one).
        spare = eligible(self.state, job.model_copy(update={"id": "(replacement)"}), self.desk.alive())
        if not spare:
            return
        (new,) = new_verification_jobs(self.state, job.finding, job.round, job.stance, 1)
        self.state.jobs.append(new)
        self.desk.save()
        self.desk.event(Event.VERIFIER_REPLACED, job=job.id, replacement=new.id)

    def abort(self, reason: str) -> None:
        """Stop the run as failed: every open job is cancelled."""
        self.state.aborted = reason
        for job in self.state.jobs:
            if not job.terminal:
                job.status = JobStatus.CANCELLED
                job.failure = reason
                job.ended_at = time.time()
        for book in self.state.workers:
            if book.job is not None:
                book.job = None
                self.desk.gateway_job(book.n, None)
        self.desk.save()
        self.desk.event(Event.ABORTED, reason=reason)

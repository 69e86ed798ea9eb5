"""What the changes machinery writes into the run folder (changes/<job>/change.json, checks.json, repo.json,
queue.jsonl) and what report.json says of each change: its row, written as the flow moves (`write_row`) and
read for the report (`change_rows`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from enum import StrEnum

from pydantic import Field

from orch.run.files import atomic_write
from orch.run.folder import RunFolder
from orch.run.records import Strict, utcnow


class ChangeStatus(StrEnum):
    """Where a writer task's change ended (report.json `changes[].status`)."""

    LANDED = "LANDED"
    """Committed on `orch/<run>` after the gate and the queue."""
    REJECTED = "REJECTED"
    """Refused by the gate: `reason` says which part (checks, scope, review). The gate's verdict, a result like a
    REFUTED finding: it keeps the run from passing only where the task needed a change
    (orch.lead.changes.decisions.unlanded)."""
    CONFLICT = "CONFLICT"
    """No longer applied to the integration head, and the rebases ran out."""
    FAILED = "FAILED"
    """No change came: the job failed, a rebase made none, or it could not be taken."""
    UNCHANGED = "UNCHANGED"
    """The writer's job completed and left the tree as it was (a writer that found nothing to change, like a
    finder with no findings); the run's outcome counts it as not landed only where the task needed a change
    (orch.lead.changes.decisions.unlanded)."""


class RejectReason(StrEnum):
    CHECKS = "checks"
    SCOPE = "scope"
    REVIEW = "review"


class RepoInfo(Strict):
    """repo.json: where the run's repository came from (written once, at the start)."""

    source: str | None
    """The user's repository (its top folder), only ever read; None for a snapshot of a folder outside git."""
    workdir: str
    """The workdir the run was started on (inside `source`, or the snapshotted folder)."""
    base: str
    """The base commit (sha) every first worktree starts from."""
    base_rev: str
    """What the user asked for (`HEAD`, `--base REV`, or `snapshot`)."""
    snapshot: bool = False
    """The base commit is the tree as it was (`--snapshot`), not a commit of the user's."""
    subdir: str = ""
    """The workdir's path inside the repository ('' at its top): the worktrees and checks start there."""
    branch: str
    """The integration branch in the run's repository: `orch/<run>`."""


class CheckResult(Strict):
    """One check command's run on one tree (checks.json holds a list of these)."""

    command: str
    exit_code: int | None
    """None when it was stopped at the time limit or past a cap."""
    seconds: float
    timed_out: bool = False
    output_tail: str = ""
    """The last bytes of its stdout and stderr (interleaved), at most `changes.check_output_bytes`."""
    output_bytes: int = 0
    """How much it printed in all."""
    stopped: str = ""
    """Why it was killed before its end, past one of the checks' caps (memory, disk): it failed."""

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.stopped


class ChecksRecord(Strict):
    """checks.json: the checks on one tree, as evidence."""

    tree: str
    """What was checked: `base <sha>`, `change <job> on <sha>`, `integrated <job> on <sha>`."""
    sandbox: str
    """How they were confined: `bwrap` (no network, only the copy writable) or `uid <n>`."""
    results: list[CheckResult]
    regressions: list[str] = Field(default_factory=list)
    """Commands that passed on the base and fail here."""
    at: dt.datetime = Field(default_factory=utcnow)


class Change(Strict):
    """change.json: a writer job's change as the controller took it from a snapshot of its worktree."""

    job: str
    task: str
    writer: int
    agent: str
    base: str
    """The commit the worktree was made from."""
    tree: str | None
    """The git tree of the snapshot (None when nothing could be taken)."""
    files: list[str] = Field(default_factory=list)
    """Paths the change adds, modifies or deletes (from the tree's root)."""
    diffstat: str = ""
    """`git diff --stat`'s last line: N files changed, +A -D."""
    patch_id: str | None = None
    """`git patch-id --stable` of the patch: equal for the same change on another base (context aside)."""
    refused: list[str] = Field(default_factory=list)
    """What the snapshot refused (a symlink leaving the tree, a file over the cap, a special file, a hard
    link): any refusal rejects the change for scope."""
    ignored: list[str] = Field(default_factory=list)
    """What the snapshot left out and why (git metadata the worker made: `.git` folders or files)."""
    summary: str = ""
    taken: dt.datetime = Field(default_factory=utcnow)

    @property
    def empty(self) -> bool:
        return not self.files


class IntegrationResult(StrEnum):
    LANDED = "LANDED"
    CONFLICT = "CONFLICT"
    CHECKS_FAILED = "CHECKS_FAILED"


class Integration(Strict):
    """One attempt of the queue to land a change on `orch/<run>` (a line of queue.jsonl)."""

    job: str
    result: IntegrationResult
    head: str
    """The integration head the change was applied to."""
    commit: str | None = None
    """The landed commit (LANDED only): the new head."""
    detail: str = ""
    """CONFLICT: what did not apply (git apply's messages); CHECKS_FAILED: which checks regressed."""
    checks: list[CheckResult] = Field(default_factory=list)
    at: dt.datetime = Field(default_factory=utcnow)


class ReviewCell(Strict):
    """A reviewer's verdict on a change, as the report shows it (filled by the controller flow)."""

    job: str
    reviewer: int | None
    agent: str | None = None
    verdict: str
    reason: str = ""


class ChangeRow(Strict):
    """report.json `changes[]`: one writer task's change and how it ended."""

    task: str
    writer: int | None
    """The worker whose change this is (the last one, after rebases)."""
    agent: str | None = None
    job: str | None = None
    """The job whose change is reported (its folder: changes/<job>/)."""
    status: ChangeStatus
    reason: RejectReason | None = None
    """REJECTED only: which gate refused it."""
    detail: str = ""
    """Why, in one line: the regressed checks, the protected paths, the reviewers' reasons, the conflict."""
    diffstat: str = ""
    files: list[str] = Field(default_factory=list)
    checks: list[CheckResult] = Field(default_factory=list)
    reviews: list[ReviewCell] = Field(default_factory=list)
    rebases: int = 0
    commit: str | None = None
    """LANDED: the commit on `orch/<run>`."""
    fails: bool = False
    """report.json: it keeps the ended run from passing (orch.lead.changes.decisions.unlanded: CONFLICT, FAILED;
    REJECTED or UNCHANGED where the task needed a change). A failing test in report.junit.xml. The controller's
    own record (changes/tasks/) leaves it False."""


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

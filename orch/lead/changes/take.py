"""Taking a writer's change: the controller copies the worktree (so a process the worker left behind cannot
alter what is diffed), refuses what must not be taken, hashes the copy into the run's repository with its
own git dir and configuration, and writes `changes/<job>/` (patch.diff, diffstat.txt, summary.md,
change.json). The worker hands nothing over; its files are only read, never executed or trusted as git
metadata.
"""

from __future__ import annotations

from pathlib import Path

from orch.lead.changes.records import Change
from orch.lead.changes.repo import RunRepo

MAX_FILE_BYTES = 1 << 20
MAX_FILES = 100_000


def take_change(
    repo: RunRepo,
    worktree: Path,
    base: str,
    job: str,
    summary: str,
    *,
    task: str = "",
    writer: int = 0,
    agent: str = "",
    max_file_bytes: int = MAX_FILE_BYTES,
    max_files: int = MAX_FILES,
) -> Change:
    """Snapshot `worktree` (the job's worktree, a checkout of `base`), diff it against `base` and write
    `changes/<job>/`. Refusals (a symlink leaving the tree, a file over `max_file_bytes`, a special file,
    a hard link) are listed in `Change.refused` (the gate rejects such a change for scope); `.git` entries
    the worker made are left out (`Change.ignored`). A missing or unreadable worktree gives an empty
    change with the reason in `refused`."""
    raise NotImplementedError


def patch_path(repo: RunRepo, job: str) -> Path:
    """changes/<job>/patch.diff."""
    return repo.run.change_dir(job) / "patch.diff"


def load_change(repo: RunRepo, job: str) -> Change:
    """changes/<job>/change.json as take_change wrote it."""
    raise NotImplementedError

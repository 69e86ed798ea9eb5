"""The run's own git repository (`<run>/repo.git`): the base commit, the integration branch `orch/<run>`,
and checkouts of its commits into worktrees and sandboxes.

The user's repository and working tree are only ever read: the base is fetched from it (upload-pack reads;
nothing is written there), a snapshot is hashed into the run's repository through a private index, and
the dirty check runs with optional locks off (no index refresh). `choose_base` does every check before
anything is created, so bad input leaves nothing behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orch.lead.changes.records import RepoInfo
from orch.run.folder import RunFolder

SNAPSHOT = "snapshot"


@dataclass(frozen=True)
class BaseChoice:
    """What a run with writers starts from, decided by reading the workdir only."""

    workdir: Path
    source: Path | None
    """The repository's top folder (None: the workdir is not in a git repository; snapshot only)."""
    subdir: str
    """The workdir inside the repository ('' at its top)."""
    commit: str | None
    """The base commit in the user's repository (None: a snapshot of a folder outside git)."""
    rev: str
    """What was asked: `HEAD`, the `--base` revision, or `snapshot`."""
    snapshot: bool


def choose_base(workdir: Path, base: str | None, snapshot: bool) -> BaseChoice:
    """Check the workdir for a run with writers, reading only. UsageError (one line) for: no git repository
    without --snapshot, a dirty tree without --snapshot, a base revision that does not exist, --base with
    --snapshot."""
    raise NotImplementedError


def branch_name(run: str) -> str:
    """The integration branch of run `run`: `orch/<run>` (in the run's repository; `orch apply`'s default)."""
    return f"orch/{run}"


class RunRepo:
    """The run's repository; only the controller writes it (mode 0700: under strict isolation no worker
    uid can even read it)."""

    def __init__(self, run: RunFolder, info: RepoInfo) -> None:
        self.run = run
        self.info = info

    @classmethod
    def create(cls, run: RunFolder, workdir: Path, base: str | None, snapshot: bool) -> RunRepo:
        """Make `<run>/repo.git` with the base commit and branch `orch/<run>` at it, and repo.json.
        UsageError as `choose_base` (`orch run` calls orch.lead.changes.start.prepare before the run exists,
        so bad input creates nothing; this is the same for a folder that exists)."""
        raise NotImplementedError

    @classmethod
    def open(cls, run: RunFolder) -> RunRepo:
        """The run's repository as `create` left it (NotFoundError for a run without one)."""
        raise NotImplementedError

    @property
    def git_dir(self) -> Path:
        return self.run.repo_dir

    @property
    def base(self) -> str:
        """The base commit's sha."""
        return self.info.base

    @property
    def branch(self) -> str:
        return self.info.branch

    @property
    def subdir(self) -> str:
        """The workdir's path inside the tree: where a worker's workdir and the checks start."""
        return self.info.subdir

    def head(self) -> str:
        """The integration head: the commit `orch/<run>` points at (the base until a change lands)."""
        raise NotImplementedError

    def checkout(self, commit: str, dest: Path) -> None:
        """Write the files of `commit` into `dest` (an existing, empty folder): plain files, executable bits
        and symlinks as committed, no `.git` (nothing the controller would later trust), no attribute-driven
        conversion (the bytes as committed)."""
        raise NotImplementedError

    def tree_of(self, commit: str) -> str:
        """The tree sha of a commit."""
        raise NotImplementedError

"""A run with writers, before it exists: the base chosen (reading the user's repository only), the checks'
sandbox found working, the run's repository built in a private temporary folder and the checks run on the
base there (a check that does not exist is refused now). `install` moves it all into the new run folder;
anything that fails before leaves nothing behind."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orch.lead.changes.records import ChecksRecord, RepoInfo
from orch.lead.changes.repo import BaseChoice
from orch.lead.spec import FleetSpec
from orch.run.folder import RunFolder
from orch.run.records import Backend


@dataclass
class Prepared:
    """A run's repository and base checks, made before the run folder; `install` or `discard` it."""

    choice: BaseChoice
    staging: Path
    """The temporary folder holding repo.git (on the run folders' filesystem, so install is a rename)."""
    info: RepoInfo
    baseline: ChecksRecord | None
    """None when the spec has no checks, or when the checks run in the run's container (its controller runs
    them on the base at its start: `ensure_baseline`)."""

    def install(self, run: RunFolder) -> None:
        """Move the repository into `<run>/repo.git`, write repo.json and base.checks.json."""
        raise NotImplementedError

    def discard(self) -> None:
        raise NotImplementedError


def prepare(spec: FleetSpec, name: str, base: str | None, snapshot: bool, backend: Backend) -> Prepared:
    """Everything a run with writers needs that can be refused, done before the run exists. UsageError (one
        line) for: no git repository without --snapshot, a dirty tree without --snapshot, an unknown base, no
        working sandbox for the checks, a check command that does not exist (exit 127 on the base). The checks run
    here on the base for a local run; a container run's controller runs them there (`ensure_baseline`)."""
    raise NotImplementedError


def ensure_baseline(run: RunFolder, spec: FleetSpec) -> ChecksRecord | None:
    """base.checks.json, run now if it is not there yet (a container run's controller, at its start)."""
    raise NotImplementedError

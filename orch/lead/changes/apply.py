"""`orch apply NAME [--branch B]`: the run's landed branch fetched into the user's repository as a new
branch. The working tree, the index, HEAD and every existing branch are left as they are."""

from __future__ import annotations

from pathlib import Path

from orch.run.folder import RunFolder


def apply_run(run: RunFolder, cwd: Path, branch: str | None = None) -> str:
    """Fetch `orch/<run>` from the run's repository into the repository at `cwd` (which must be the run's
    source repository) as `branch` (default `orch/<run>`); the branch name. UsageError (one line, nothing
    written) outside that repository, for a run without a repository, or for a branch that exists."""
    raise NotImplementedError

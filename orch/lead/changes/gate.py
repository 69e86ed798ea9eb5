"""The gate a change passes before review and the queue: the checks, run by the controller in a fresh
disposable sandbox (a copy of the tree, no network, no credentials, no run folder, limits on time and
output), and the scope (no edit to a protected path the task does not allow).

The sandbox is bubblewrap: a new network namespace with nothing in it, a new pid namespace (killing it
kills every process a check started), the filesystem read-only but for the copy and a private /tmp, and
the home folder, ORCH_HOME (run folders, agent config dirs), /run (the Docker socket) hidden under empty
tmpfs. Without a working bwrap the run with checks is refused in one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from orch.lead.changes.records import Change, CheckResult, ChecksRecord
from orch.lead.changes.repo import RunRepo

CHECK_TIMEOUT = 600.0
OUTPUT_BYTES = 64 << 10
TREE_MOUNT = "/tmp/orch-check/tree"
"""Where the copy is seen inside the sandbox (a fixed path: output tails compare across trees)."""
NOT_FOUND = 127


def sandbox_available() -> str | None:
    """None when the checks' sandbox works here, else why not (one line, for a UsageError)."""
    raise NotImplementedError


def run_checks(
    checks: Sequence[str],
    tree: Path,
    *,
    subdir: str = "",
    timeout: float = CHECK_TIMEOUT,
    output_bytes: int = OUTPUT_BYTES,
) -> list[CheckResult]:
    """Run each check command (`sh -c`) in the sandbox over `tree` (a disposable copy: the checks may write
    it), from `tree/subdir`; one result per command, in order, whatever each exits with."""
    raise NotImplementedError


def check_commit(
    repo: RunRepo,
    commit_or_tree: str,
    checks: Sequence[str],
    label: str,
    *,
    timeout: float = CHECK_TIMEOUT,
    output_bytes: int = OUTPUT_BYTES,
    baseline: Sequence[CheckResult] = (),
) -> ChecksRecord:
    """Check out `commit_or_tree` into a fresh temporary folder, run the checks there, remove it; the record
    names the regressions against `baseline`."""
    raise NotImplementedError


def baseline(
    repo: RunRepo, checks: Sequence[str], *, timeout: float = CHECK_TIMEOUT, output_bytes: int = OUTPUT_BYTES
) -> ChecksRecord:
    """The checks on the base, once, written to base.checks.json. UsageError when a command does not exist
    (exit 127 on the base)."""
    raise NotImplementedError


def gate_checks(
    repo: RunRepo, change: Change, checks: Sequence[str], base_results: Sequence[CheckResult], **limits: float
) -> ChecksRecord:
    """The checks on the change's tree (base + patch), written to changes/<job>/checks.json."""
    raise NotImplementedError


def regressions(base: Sequence[CheckResult], now: Sequence[CheckResult]) -> list[str]:
    """Commands that passed on the base and do not pass now (a check failing on the base may keep failing)."""
    passed = {r.command for r in base if r.passed}
    return [r.command for r in now if r.command in passed and not r.passed]


def matches(path: str, glob: str) -> bool:
    """Whether a tree path (from the root, `/`-separated) matches a protect/allow glob: `**` spans folders,
    `*` and `?` stay within one; a glob without `/` matches the file name at any depth."""
    raise NotImplementedError


def scope_violations(change: Change, protect: Sequence[str], allow: Sequence[str], subdir: str = "") -> list[str]:
    """What puts the change out of scope: the snapshot's refusals, and each protected path it edits that the
    task does not allow (paths are matched from the tree's root and from the workdir `subdir`)."""
    raise NotImplementedError


def unmatched_globs(tree_files: Sequence[str], globs: Sequence[str]) -> list[str]:
    """The globs that match no file of the base (a warning at the start, not an error)."""
    return [g for g in globs if not any(matches(f, g) for f in tree_files)]

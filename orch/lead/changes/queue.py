"""The integration queue: approved changes are applied one at a time onto `orch/<run>`, each on top of the
last; the checks run again on each result; a landed change is one commit whose message carries the task
and the writer's summary, with trailers for the writer's agent kind, the reviewers and the checks.

A change that no longer applies is a CONFLICT, one that breaks a check once integrated CHECKS_FAILED: the
controller flow turns either into a rebase job. `same_change` tells whether a rebased patch is the reviewed
one (context aside), so a rebase that changed more is reviewed again.
"""

from __future__ import annotations

from collections.abc import Sequence

from orch.lead.changes.gitcmd import patch_id
from orch.lead.changes.records import Change, CheckResult, Integration
from orch.lead.changes.repo import RunRepo


def integrate(
    repo: RunRepo,
    change: Change,
    checks: Sequence[str],
    baseline: Sequence[CheckResult] = (),
    *,
    reviewers: Sequence[str] = (),
    task_title: str = "",
    timeout: float = 600.0,
    output_bytes: int = 64 << 10,
) -> Integration:
    """Apply changes/<job>/patch.diff onto the integration head (three-way, in a private index: no worktree),
    run the checks on the result, and on success move `orch/<run>` to a new commit. `reviewers`: who approved
    it, as `agent-2 (codex)`. The attempt is appended to changes/queue.jsonl."""
    raise NotImplementedError


def commit_message(change: Change, task_title: str, reviewers: Sequence[str], checks: Sequence[CheckResult]) -> str:
    """The landed commit's message: the task, the writer's summary, and the Orch-* trailers."""
    raise NotImplementedError


def same_change(reviewed: bytes, rebased: bytes) -> bool:
    """Whether a rebased patch makes the same edits as the reviewed one (line numbers and context aside)."""
    return patch_id(reviewed) == patch_id(rebased)

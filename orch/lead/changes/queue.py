"""The integration queue: approved changes are applied one at a time onto `orch/<run>`, each on top of the
last; the checks run again on each result; a landed change is one commit whose message carries the task
and the writer's summary, with trailers for the writer's agent, the reviewers and the checks.

A change that no longer applies is a CONFLICT, one that breaks a check once integrated CHECKS_FAILED: the
controller flow turns either into a rebase job. `same_change` tells whether a rebased patch is the reviewed
one (context aside), so a rebase that changed more is reviewed again.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from orch.jobs.changes import Change, CheckResult, Integration, IntegrationResult
from orch.lead.changes import links
from orch.lead.changes.checkwatch import DEFAULT_LIMITS, CheckLimits
from orch.lead.changes.gate import check_commit
from orch.lead.changes.gitcmd import git, out, patch_id
from orch.lead.changes.grading import Grading
from orch.lead.changes.repo import RunRepo
from orch.lead.changes.stopper import Stopper
from orch.lead.changes.take import patch_path
from orch.run.files import append_line, atomic_write


def integrate(
    repo: RunRepo,
    change: Change,
    checks: Sequence[str],
    baseline: Sequence[CheckResult] = (),
    *,
    reviewers: Sequence[str] = (),
    task_title: str = "",
    limits: CheckLimits = DEFAULT_LIMITS,
    grading: Grading | None = None,
    stopper: Stopper | None = None,
) -> Integration:
    """Apply changes/<job>/patch.diff onto the integration head (three-way, in a private index: no worktree),
    run the checks on the result (its grading paths the base's: `grading`), and on success move `orch/<run>` to
    a new commit. `reviewers`: who approved
    it, as `agent-2 (codex)`. The attempt is appended to changes/queue.jsonl. A change already on the branch
    (a controller killed between the branch's move and its books' save) is LANDED as it is, not applied again."""
    head = repo.head()
    landed = landed_commit(repo, change.job)
    if landed is not None:
        return _log(repo, Integration(job=change.job, result=IntegrationResult.LANDED, head=head, commit=landed))
    patch = patch_path(repo, change.job).read_bytes()
    if not patch.strip() or change.tree is None:
        raise ValueError(f"change {change.job} is empty: nothing to integrate")
    tree, conflict = merged_tree(repo, change, head, patch)
    if tree is not None and tree != change.tree and (led_out := links.problems(repo, tree, head)):
        tree, conflict = None, "once integrated, " + "; ".join(led_out)  # a rebase takes it again, and judges it
    if tree is None:
        return _log(repo, Integration(job=change.job, result=IntegrationResult.CONFLICT, head=head, detail=conflict))
    results: list[CheckResult] = []
    if checks:
        record = check_commit(
            repo,
            tree,
            checks,
            f"integrated {change.job} on {head}",
            limits=limits,
            grading=grading,
            baseline=baseline,
            stopper=stopper,
        )
        results = record.results
        atomic_write(repo.run.change_integrated_checks(change.job), record.model_dump_json(indent=2) + "\n")
        if record.regressions:
            detail = "; ".join(f"{c}: {_exit(r)}" for c in record.regressions for r in results if r.command == c)
            return _log(
                repo,
                Integration(
                    job=change.job, result=IntegrationResult.CHECKS_FAILED, head=head, detail=detail, checks=results
                ),
            )
    message = commit_message(change, task_title, reviewers, results)
    author = {"GIT_AUTHOR_NAME": f"orch agent-{change.writer} ({change.agent or 'writer'})"}
    commit = out(repo.git_dir, "commit-tree", tree, "-p", head, "-F", "-", env=author, input=message.encode())
    # Compare-and-swap: the branch moves only from the head this change was applied to.
    git(repo.git_dir, "update-ref", "-m", f"orch: land {change.job}", f"refs/heads/{repo.branch}", commit, head)
    return _log(
        repo, Integration(job=change.job, result=IntegrationResult.LANDED, head=head, commit=commit, checks=results)
    )


def landed_commit(repo: RunRepo, job: str) -> str | None:
    """The commit on `orch/<run>` that landed change `job`, read from its Orch-Job trailer (git parses only the
    message's last paragraph as trailers, which orch writes after the writer's summary: a summary cannot fake
    one), or None."""
    trailers = "--format=%H %(trailers:key=Orch-Job,valueonly,separator=%x20)"
    listing = out(repo.git_dir, "log", trailers, f"{repo.base}..{repo.head()}")
    for line in listing.splitlines():
        commit, _, jobs = line.partition(" ")
        if job in jobs.split():
            return commit
    return None


def merged_tree(repo: RunRepo, change: Change, head: str, patch: bytes) -> tuple[str | None, str]:
    """The tree of `head` with the patch applied (three-way when the context moved): (tree, "") or
    (None, what conflicted)."""
    if head == change.base:
        return change.tree, ""
    with tempfile.TemporaryDirectory(prefix="orch-queue-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(repo.git_dir, "read-tree", head, env=env)
        done = git(
            repo.git_dir, "apply", "--cached", "--3way", "--whitespace=nowarn", "-", env=env, input=patch, check=False
        )
        if done.returncode != 0:
            lines = done.stderr.decode(errors="replace").strip().splitlines()
            return None, " ".join(lines[-6:]) or f"git apply exit {done.returncode}"
        return out(repo.git_dir, "write-tree", env=env), ""


def _exit(result: CheckResult) -> str:
    return "timed out" if result.timed_out else result.stopped or f"exit {result.exit_code}"


def _log(repo: RunRepo, integration: Integration) -> Integration:
    append_line(repo.run.queue_log, integration.model_dump_json())
    return integration


def commit_message(change: Change, task_title: str, reviewers: Sequence[str], checks: Sequence[CheckResult]) -> str:
    """The landed commit's message: the task, the writer's summary, and the Orch-* trailers."""
    title = " ".join((task_title or f"task {change.task}").split())
    summary = change.summary.strip() or "(the writer gave no summary)"
    trailers = [f"Orch-Task: {change.task}", f"Orch-Job: {change.job}"]
    trailers.append(f"Orch-Writer-Agent: {change.agent or 'unknown'} (agent-{change.writer})")
    trailers += [f"Orch-Reviewed-By: {' '.join(r.split())}" for r in reviewers] or ["Orch-Reviewed-By: none"]
    trailers += [f"Orch-Checks: {_exit(r)}: {' '.join(r.command.split())}" for r in checks] or ["Orch-Checks: none"]
    return f"{title[:72]}\n\n{summary}\n\n" + "\n".join(trailers) + "\n"


def same_change(reviewed: bytes, rebased: bytes) -> bool:
    """Whether a rebased patch makes the same edits as the reviewed one (line numbers and context aside)."""
    return patch_id(reviewed) == patch_id(rebased)

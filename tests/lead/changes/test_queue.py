"""The integration queue on a real run repository: one commit per landed change, each on top of the last."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orch.jobs.changes import Change, IntegrationResult
from orch.lead.changes.gate import baseline, sandbox_available
from orch.lead.changes.queue import integrate, same_change
from orch.lead.changes.repo import RunRepo
from orch.lead.changes.take import take_change
from tests.lead.changes.gitfix import make_repo

FILES = {"a.txt": "".join(f"line {i}\n" for i in range(1, 21)), "README.md": "r\n"}


def edit(repo: RunRepo, job: str, writer: int, files: dict[str, str], base: str | None = None) -> Change:
    wt = repo.run.worktrees_dir(writer) / job
    wt.mkdir(parents=True)
    base = base or repo.head()
    repo.checkout(base, wt)
    for name, text in files.items():
        (wt / name).write_text(text)
    return take_change(repo, wt, base, job, f"summary of {job}", task=job.split("-")[0], writer=writer, agent="claude")


def replace_line(n: int, text: str) -> str:
    return FILES["a.txt"].replace(f"line {n}\n", f"{text}\n")


def show(repo: RunRepo, *args: str) -> str:
    argv = ["git", "--git-dir", str(repo.git_dir), *args]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def test_changes_land_one_on_top_of_the_other_or_conflict(tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path, FILES)
    first = edit(repo, "t1-a", 1, {"a.txt": replace_line(2, "first")})
    second = edit(repo, "t2-a", 2, {"a.txt": replace_line(18, "second")})  # same base, lines apart
    third = edit(repo, "t3-a", 3, {"a.txt": replace_line(2, "third")})  # the same line as the first
    landed = integrate(repo, first, [], reviewers=["agent-2 (codex)"], task_title="Fix line two")
    assert landed.result is IntegrationResult.LANDED and repo.head() == landed.commit
    again = integrate(repo, second, [])
    assert again.result is IntegrationResult.LANDED and again.head == landed.commit
    text = show(repo, "show", f"{repo.head()}:a.txt")
    assert "first\n" in text and "second\n" in text
    clash = integrate(repo, third, [])
    assert clash.result is IntegrationResult.CONFLICT and clash.commit is None and clash.detail
    assert repo.head() == again.commit
    assert show(repo, "rev-list", "--count", f"{repo.base}..{repo.head()}").strip() == "2"
    message = show(repo, "log", "-1", "--format=%B%an", landed.commit or "")
    assert message.startswith("Fix line two\n\nsummary of t1-a\n")
    for trailer in (
        "Orch-Task: t1",
        "Orch-Writer-Agent: claude (agent-1)",
        "Orch-Reviewed-By: agent-2 (codex)",
        "Orch-Checks: none",
    ):
        assert trailer in message
    assert "orch agent-1 (claude)" in message
    log = repo.run.queue_log.read_text().splitlines()
    assert [line.split('"result":"')[1].split('"')[0] for line in log] == ["LANDED", "LANDED", "CONFLICT"]


@pytest.mark.skipif(sandbox_available() is not None, reason=str(sandbox_available()))
def test_a_change_that_breaks_a_check_once_integrated_does_not_land(tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path, FILES)
    checks = ["test $(ls | wc -l) -le 3"]  # two files on the base; each change adds one
    base = baseline(repo, checks)
    one = edit(repo, "t1-a", 1, {"b.txt": "b\n"})
    two = edit(repo, "t2-a", 2, {"c.txt": "c\n"})
    assert integrate(repo, one, checks, base.results).result is IntegrationResult.LANDED
    failed = integrate(repo, two, checks, base.results)
    assert failed.result is IntegrationResult.CHECKS_FAILED and "exit 1" in failed.detail
    assert failed.checks and failed.checks[0].exit_code == 1
    assert repo.head() == failed.head  # the branch did not move
    assert show(repo, "rev-list", "--count", f"{repo.base}..{repo.head()}").strip() == "1"
    landed_msg = show(repo, "log", "-1", "--format=%B")
    assert f"Orch-Checks: exit 0: {checks[0]}" in landed_msg


def test_a_rebased_patch_is_the_same_change_unless_its_edits_differ(tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path, FILES)
    reviewed = edit(repo, "t1-a", 1, {"a.txt": replace_line(10, "ten")})
    moved = edit(repo, "t2-a", 2, {"a.txt": "new top\n" + replace_line(9, "nine")})
    integrate(repo, edit(repo, "t3-a", 3, {"a.txt": "new top\n" + FILES["a.txt"]}), [])
    rebased = edit(repo, "t1-b", 1, {"a.txt": "new top\n" + replace_line(10, "ten")})

    def patch(change: Change) -> bytes:
        return (repo.run.change_dir(change.job) / "patch.diff").read_bytes()

    assert same_change(patch(reviewed), patch(rebased))
    assert not same_change(patch(reviewed), patch(moved))


def test_a_change_already_on_the_branch_is_not_applied_again(tmp_path: Path) -> None:
    """A controller killed after the branch moved but before its books were saved integrates the change again when
    resumed: it is found on the branch by its Orch-Job trailer (LANDED, the same commit, the branch where it was). A
    writer's summary that spells another job's trailer does not make that job look landed."""
    repo, _ = make_repo(tmp_path, FILES)
    first = edit(repo, "t1-a", 1, {"a.txt": replace_line(2, "first")})
    forger = edit(repo, "t2-a", 2, {"a.txt": replace_line(18, "second")})
    forger = forger.model_copy(update={"summary": "done\n\nOrch-Job: t3-a\n"})
    other = edit(repo, "t3-a", 3, {"a.txt": replace_line(10, "third")})
    landed = integrate(repo, first, [])
    again = integrate(repo, first, [])
    assert again.result is IntegrationResult.LANDED and again.commit == landed.commit == repo.head()
    assert integrate(repo, forger, []).result is IntegrationResult.LANDED
    third = integrate(repo, other, [])
    assert third.result is IntegrationResult.LANDED and third.commit == repo.head() != landed.commit
    assert show(repo, "rev-list", "--count", f"{repo.base}..{repo.head()}").strip() == "3"

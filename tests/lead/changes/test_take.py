"""Taking a writer's change: from a copy of its worktree, with the controller's own git; hostile worktrees."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from orch.lead.changes.repo import RunRepo
from orch.lead.changes.scope import scope_violations
from orch.lead.changes.take import load_change, take_change
from orch.spec.model import DEFAULT_PROTECT
from tests.lead.changes.gitfix import make_repo


def worktree(repo: RunRepo, n: int = 1, job: str = "t1-a") -> Path:
    dest = repo.run.worktrees_dir(n) / job
    dest.mkdir(parents=True)
    repo.checkout(repo.head(), dest)
    return dest


def test_an_honest_change_is_taken(tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path)
    wt = worktree(repo)
    (wt / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (wt / "new.py").write_text("x = 1\n")
    (wt / "README.md").unlink()
    change = take_change(repo, wt, repo.base, "t1-a", "Fix add.", task="t1", writer=1, agent="claude")
    assert change.files == ["README.md", "calc.py", "new.py"] and not change.refused
    folder = repo.run.change_dir("t1-a")
    patch = (folder / "patch.diff").read_text()
    assert "-    return a - b\n+    return a + b" in patch
    assert "3 files changed" in change.diffstat and (folder / "diffstat.txt").exists()
    assert (folder / "summary.md").read_text() == "Fix add.\n"
    assert load_change(repo, "t1-a") == change and change.patch_id


def test_an_untouched_worktree_is_an_empty_change(tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path)
    change = take_change(repo, worktree(repo), repo.base, "t1-a", "")
    assert change.empty and change.patch_id is None and not change.refused


def test_symlinks_out_of_the_tree_huge_files_and_hard_links_are_refused(tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path)
    wt = worktree(repo)
    secret = tmp_path / "secret.txt"
    secret.write_text("credential\n")
    (wt / "abs").symlink_to(secret)
    (wt / "up").symlink_to("../../../secret.txt")
    (wt / "tests" / "ok").symlink_to("../calc.py")  # inside the tree: fine
    (wt / "huge.bin").write_bytes(b"\0" * 2048)
    os.link(secret, wt / "hard.txt")
    os.mkfifo(wt / "fifo")
    change = take_change(repo, wt, repo.base, "t1-a", "", max_file_bytes=1024)
    refused = "\n".join(change.refused)
    for name in ("abs", "up", "huge.bin", "hard.txt", "fifo"):
        assert f"{name}:" in refused, name
    assert set(change.files) == {"abs", "up", "tests/ok"}  # the links are in the tree: refused, never followed
    assert b"credential" not in (repo.run.change_dir("t1-a") / "patch.diff").read_bytes()


def test_git_metadata_the_worker_planted_is_never_run(tmp_path: Path) -> None:
    """A .git folder with a hook, an fsmonitor and a filter in its config, a .git file pointing elsewhere,
    and a .gitattributes asking for a filter: nothing of it runs (the canary stays absent)."""
    repo, _ = make_repo(tmp_path)
    wt = worktree(repo)
    canary = tmp_path / "canary"
    hook = f"#!/bin/sh\ntouch {canary}\ncat\n"
    gitdir = wt / ".git"
    (gitdir / "hooks").mkdir(parents=True)
    for name in ("pre-commit", "post-checkout", "fsmonitor-watchman", "reference-transaction"):
        (gitdir / "hooks" / name).write_text(hook)
        (gitdir / "hooks" / name).chmod(0o755)
    (wt / "evil.sh").write_text(hook)
    (wt / "evil.sh").chmod(0o755)
    (gitdir / "config").write_text(
        f"[core]\n\tfsmonitor = {wt}/evil.sh\n\thooksPath = {gitdir}/hooks\n"
        f'[filter "x"]\n\tclean = {wt}/evil.sh\n\tsmudge = {wt}/evil.sh\n\trequired = true\n'
        f'[diff "x"]\n\ttextconv = {wt}/evil.sh\n'
    )
    (gitdir / "HEAD").write_text("ref: refs/heads/main\n")
    (wt / "sub").mkdir()
    (wt / "sub" / ".git").write_text(f"gitdir: {gitdir}\n")
    (wt / ".gitattributes").write_text("* filter=x diff=x\n")
    (wt / "calc.py").write_text("changed\n")
    change = take_change(repo, wt, repo.base, "t1-a", "")
    assert not canary.exists()
    assert ".gitattributes" in change.files and "calc.py" in change.files
    assert not any(".git/" in f or f.endswith("/.git") for f in change.files)
    assert any(i.startswith(".git:") for i in change.ignored) and any(i.startswith("sub/.git:") for i in change.ignored)
    assert (repo.run.change_dir("t1-a") / "patch.diff").read_text().count("+changed") == 1


def test_a_process_left_behind_cannot_alter_the_taken_change(tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path)
    wt = worktree(repo)
    (wt / "calc.py").write_text("honest\n")
    # The worker's leftover process rewrites the tree as fast as it can, forever.
    script = f"import pathlib\np = pathlib.Path({str(wt / 'calc.py')!r})\nwhile True:\n    p.write_text('evil\\n')\n"
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        change = take_change(repo, wt, repo.base, "t1-a", "")
    finally:
        proc.kill()
        proc.wait()
    folder = repo.run.change_dir("t1-a")
    patch = (folder / "patch.diff").read_bytes()
    taken = patch
    (wt / "calc.py").write_text("later\n")
    assert (folder / "patch.diff").read_bytes() == taken  # the taken patch is the controller's file
    # What was taken is one consistent snapshot, and the tree the gate checks is the one hashed.
    assert change.tree is not None
    shown = subprocess.run(
        ["git", "--git-dir", str(repo.git_dir), "show", f"{change.tree}:calc.py"], capture_output=True, check=True
    ).stdout
    assert shown in (b"honest\n", b"evil\n", b"")


def test_over_max_files_the_worktree_is_refused_whole(tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path)
    wt = worktree(repo)
    for i in range(10):
        (wt / f"f{i}").write_text("x")
    change = take_change(repo, wt, repo.base, "t1-a", "", max_files=5)
    assert any("more than 5 files" in r for r in change.refused)


def test_a_missing_worktree_is_refused(tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path)
    change = take_change(repo, tmp_path / "nope", repo.base, "t1-a", "")
    assert change.refused and change.tree is None and change.empty


def test_a_worktree_swapped_for_a_link_to_another_writers_is_refused(tmp_path: Path) -> None:
    """Worker 1 replaces its worktree with a link to worker 2's: the controller takes nothing through it."""
    repo, _ = make_repo(tmp_path)
    other = worktree(repo, 2, "t2-a")
    (other / "calc.py").write_text("worker 2's work\n")
    mine = repo.run.worktrees_dir(1) / "t1-a"
    mine.symlink_to(other)
    change = take_change(repo, mine, repo.base, "t1-a", "")
    assert change.tree is None and change.empty and "cannot be read" in change.refused[0]


def test_the_run_repository_is_the_controllers_alone(tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path)
    assert repo.git_dir.stat().st_mode & 0o777 == 0o700
    assert not list((repo.git_dir / "hooks").iterdir())  # no sample hooks either


def test_a_path_git_refuses_to_store_is_refused_not_a_crash(tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path)
    wt = worktree(repo)
    (wt / ".GIT").mkdir()
    (wt / ".GIT" / "config").write_text("[core]\n")
    (wt / "calc.py").write_text("changed\n")
    change = take_change(repo, wt, repo.base, "t1-a", "")
    assert change.tree is None and any("git refused the tree" in r for r in change.refused)


def test_weakening_the_tests_or_their_configuration_is_out_of_scope(tmp_path: Path) -> None:
    """The writer "fixes" the bug by deleting the test, adds a conftest that skips everything and edits the
    checks' configuration: each path is named; the task that allows its own test file passes."""
    files = {
        "calc.py": "def add(a, b):\n    return a - b\n",
        "tests/test_calc.py": "def test_add():\n    pass\n",
        "pyproject.toml": "[tool.pytest.ini_options]\n",
    }
    repo, _ = make_repo(tmp_path, files)
    wt = worktree(repo)
    (wt / "tests" / "test_calc.py").unlink()
    (wt / "conftest.py").write_text("collect_ignore_glob = ['*']\n")
    (wt / "pyproject.toml").write_text("[tool.pytest.ini_options]\naddopts = '-k nothing'\n")
    (wt / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    change = take_change(repo, wt, repo.base, "t1-a", "")
    problems = scope_violations(change, DEFAULT_PROTECT, [])
    assert [p.split(":")[0] for p in problems] == ["conftest.py", "pyproject.toml", "tests/test_calc.py"]
    allowed = scope_violations(change, DEFAULT_PROTECT, ["tests/test_calc.py", "conftest.py", "pyproject.toml"])
    assert allowed == []

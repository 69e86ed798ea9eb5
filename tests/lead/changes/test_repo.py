"""The run's own repository: made from the user's repository by reading it only; checkouts of its commits."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from orch.errors import OrchError, UsageError
from orch.lead.changes.repo import RunRepo, choose_base
from orch.run.uids import drop_argv
from tests.lead.changes.gitfix import ENV, fingerprint, make_repo, run_folder, ugit, user_repo


def test_the_users_repository_is_never_written(tmp_path: Path) -> None:
    user = user_repo(tmp_path / "user")
    ugit(user, "status")  # the index as a user's git leaves it (stat info refreshed)
    before = fingerprint(user)
    run = run_folder(workdir=user)
    repo = RunRepo.create(run, user, None, False)
    assert fingerprint(user) == before
    assert repo.base == ugit(user, "rev-parse", "HEAD") == repo.head()
    assert repo.branch == "orch/r1" and repo.info.source == str(user.resolve())
    assert run.repo_dir.stat().st_mode & 0o077 == 0  # the controller's alone
    assert RunRepo.open(run).info == repo.info


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a repository to another uid needs root (CI runs as root)")
def test_a_repository_another_uid_owns_is_read_as_in_a_ci_jobs_container(tmp_path: Path) -> None:
    """A CI job's container runs as root over the runner's checkout, which another uid owns: git refuses such
    a repository as "dubious ownership", and the fetch of the base failed with only "make sure you have the
    correct access rights". orch trusts that one repository for its own reads of it, and nothing else."""
    tmp_path.chmod(0o755)
    user = user_repo(tmp_path / "user", {"pkg/a.py": "1\n"})
    for path in [user, *user.rglob("*")]:
        os.chown(path, 4242, 4242, follow_symlinks=False)
    before = fingerprint(user)
    run = run_folder(workdir=user / "pkg")
    repo = RunRepo.create(run, user / "pkg", None, False)
    assert repo.base == repo.head() and repo.info.subdir == "pkg"
    assert fingerprint(user) == before
    # The user's own git still refuses it: orch's trust went into no configuration of theirs.
    refused = subprocess.run(["git", "status"], cwd=user, env=ENV, capture_output=True, text=True, check=False)
    assert refused.returncode != 0 and "dubious ownership" in refused.stderr


def test_base_revision_and_subdir(tmp_path: Path) -> None:
    user = user_repo(tmp_path / "user", {"pkg/a.py": "1\n"})
    first = ugit(user, "rev-parse", "HEAD")
    (user / "pkg" / "a.py").write_text("2\n")
    ugit(user, "commit", "-qam", "second")
    choice = choose_base(user / "pkg", "HEAD~1", False)
    assert choice.commit == first and choice.subdir == "pkg" and choice.rev == "HEAD~1"


@pytest.mark.parametrize(
    ("setup", "base", "snapshot", "words"),
    [
        ("plain", None, False, "not in a git repository"),
        ("dirty", None, False, "uncommitted change"),
        ("untracked", None, False, "uncommitted change"),
        ("clean", "no-such-rev", False, "no such revision"),
        ("clean", "HEAD", True, "not both"),
        ("empty", None, False, "no commit yet"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    tmp_path: Path, setup: str, base: str | None, snapshot: bool, words: str
) -> None:
    work = tmp_path / "w"
    if setup == "plain":
        work.mkdir()
        (work / "f").write_text("x")
    elif setup == "empty":
        work.mkdir()
        ugit(work, "init", "-q")
    else:
        user_repo(work)
        if setup == "dirty":
            (work / "calc.py").write_text("changed\n")
        if setup == "untracked":
            (work / "new.py").write_text("new\n")
    before = fingerprint(work)
    with pytest.raises(UsageError) as err:
        choose_base(work, base, snapshot)
    assert words in err.value.message and "\n" not in err.value.one_line()
    assert fingerprint(work) == before


def test_snapshot_of_a_dirty_tree_takes_it_as_it_is(tmp_path: Path) -> None:
    user = user_repo(tmp_path / "user")
    (user / "calc.py").write_text("dirty\n")
    (user / "new.py").write_text("new\n")
    (user / ".gitignore").write_text("*.log\n")
    (user / "x.log").write_text("ignored\n")
    before = fingerprint(user)
    run = run_folder(workdir=user)
    repo = RunRepo.create(run, user, None, True)
    assert fingerprint(user) == before
    assert repo.info.snapshot and repo.base != ugit(user, "rev-parse", "HEAD")
    dest = tmp_path / "co"
    dest.mkdir()
    repo.checkout(repo.head(), dest)
    assert (dest / "calc.py").read_text() == "dirty\n" and (dest / "new.py").exists()
    assert not (dest / "x.log").exists() and not (dest / ".git").exists()


def test_snapshot_of_a_folder_outside_git(tmp_path: Path) -> None:
    work = tmp_path / "plain"
    work.mkdir()
    (work / "a.txt").write_text("a\n")
    run = run_folder(workdir=work)
    repo = RunRepo.create(run, work, None, True)
    assert repo.info.source is None
    assert repo.files(repo.base) == ["a.txt"]
    assert sorted(p.name for p in work.iterdir()) == ["a.txt"]


def test_checkout_writes_bytes_as_committed_whatever_the_attributes(tmp_path: Path) -> None:
    files = {
        ".gitattributes": "* text eol=crlf ident\n*.sh filter=evil\n",
        "a.txt": "one\ntwo $Id$\n",
        "run.sh": "#!/bin/sh\necho hi\n",
    }
    repo, _ = make_repo(tmp_path, files)
    dest = tmp_path / "co"
    dest.mkdir()
    repo.checkout(repo.base, dest)
    assert (dest / "a.txt").read_bytes() == b"one\ntwo $Id$\n"
    assert (dest / "run.sh").read_bytes() == b"#!/bin/sh\necho hi\n"
    with pytest.raises(ValueError):
        repo.checkout(repo.base, dest)  # not empty


def test_an_explicit_base_does_not_mind_a_dirty_tree(tmp_path: Path) -> None:
    user = user_repo(tmp_path / "user")
    (user / "calc.py").write_text("dirty\n")
    assert choose_base(user, "HEAD", False).commit == ugit(user, "rev-parse", "HEAD")


@pytest.mark.skipif(os.getuid() != 0, reason="switching uid needs root (or a strict run's SETUID)")
def test_a_checkout_for_a_worker_is_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Strict isolation: the worktree's files become the worker's uid's, in a folder the controller made and the
    worker writes through its group; the folder of its worktrees is the controller's, so the worker cannot plant
    anything where its next job's worktree goes."""
    home = Path(tempfile.mkdtemp(prefix="orch-home-", dir="/tmp"))  # pytest's own tmp is root's alone: 0700
    home.chmod(0o755)
    monkeypatch.setenv("ORCH_HOME", str(home))
    try:
        _checkout_as_worker(tmp_path)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _checkout_as_worker(tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path)
    worker = 54321
    parent = repo.run.worktrees_dir(1)  # as orch.container.owners.isolate_workers leaves it
    os.chown(parent, os.getuid(), worker)
    parent.chmod(0o2750)
    dest = parent / "t1-a"
    dest.mkdir()
    dest.chmod(0o770)  # as orch.lead.changes.writing makes it
    repo.checkout(repo.base, dest, owner=worker)
    assert {p.stat().st_uid for p in dest.rglob("*")} == {worker} and dest.stat().st_uid == os.getuid()
    assert (dest / "calc.py").read_text().startswith("def add")
    with pytest.raises(OrchError):
        repo.checkout(repo.base, dest, owner=worker)  # not empty
    as_worker = [*drop_argv(worker, worker), "sh", "-c"]
    assert subprocess.run([*as_worker, f"echo x > {dest}/new.py"]).returncode == 0  # its worktree: yes
    assert subprocess.run([*as_worker, f"touch {parent}/t2-a"], capture_output=True).returncode != 0
    assert not (parent / "t2-a").exists()

"""Links judged where they lead (orch/lead/changes/links.py): each followed through the tree's other links, as a
checkout would; a change whose link leads out of the tree, into a `.git` or round in a loop is refused when it
is taken, a merged tree that does in the queue, and `orch apply` never delivers one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from orch.jobs.changes import IntegrationResult
from orch.lead.changes.links import judge, problems
from orch.lead.changes.queue import integrate
from orch.lead.changes.repo import RunRepo
from orch.lead.changes.take import take_change
from tests.helpers import orch
from tests.lead.changes.gitfix import make_repo, ugit

INSIDE = {
    "docs/calc": "../calc.py",  # up and back in
    "here": ".",
    "d": "a/b/c",
    "y": "d/../../..",  # `..` from where d led (a/b/c): the root, inside
    "sub/up": "..",  # the root
    "chain1": "chain2",
    "chain2": "docs/calc",
    "nowhere": "missing/file",  # dangling, but inside
}


@pytest.mark.pure
@pytest.mark.parametrize(
    ("links", "out"),
    [
        (INSIDE, {}),
        ({"abs": "/etc/passwd"}, {"abs": "an absolute link"}),
        ({"up": "../../secret"}, {"up": "a link out of the tree"}),
        ({"sub/up": "..", "x": "sub/up/.."}, {"x": "a link out of the tree"}),  # reads inside, leads out
        ({"d": "a/b/c", "z": "d/../../../.."}, {"z": "a link out of the tree"}),
        ({"a": "b", "b": "c", "c": "../x"}, dict.fromkeys("abc", "a link out of the tree")),
        ({"p": "q", "q": "/tmp"}, {"p": "a link out of the tree through 'q'", "q": "an absolute link"}),
        ({"l1": "l2", "l2": "l1", "me": "me"}, dict.fromkeys(("l1", "l2", "me"), "a chain of links that never ends")),
        (
            {"g": ".git/config", "G": "sub/../.GIT/hooks", "n": "vendor/.git", "s": "git~1", "dot": ".git. "},
            dict.fromkeys(("g", "G", "n", "s", "dot"), "a link into git metadata"),
        ),
        ({"g": "gitdir", "w": "sub/.git/../../x"}, {"w": "a link into git metadata"}),
    ],
)
def test_each_link_is_followed_through_the_others(links: dict[str, str], out: dict[str, str]) -> None:
    found = judge(links)
    assert {path: why.split(" (->")[0] for path, why in found.items()} == out


@pytest.mark.pure
def test_a_link_text_with_control_characters_is_named_quoted() -> None:
    (why,) = judge({"x": "/\x1b[2Jevil\n"}).values()
    assert "\x1b" not in why and "\n" not in why and "\\x1b" in why


def worktree(repo: RunRepo, job: str = "t1-a") -> Path:
    dest = repo.run.worktrees_dir(1) / job
    dest.mkdir(parents=True)
    repo.checkout(repo.head(), dest)
    return dest


def test_a_change_whose_links_lead_out_is_refused_and_honest_links_are_kept(tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path)
    wt = worktree(repo)
    (wt / "sub").mkdir()
    os.symlink("..", wt / "sub" / "up")  # inside on its own
    os.symlink("sub/up/..", wt / "x")  # lexically `sub`: physically the tree's parent
    os.symlink("l2", wt / "l1")
    os.symlink("l1", wt / "l2")
    os.symlink(".git/config", wt / "g")
    os.symlink("../calc.py", wt / "tests" / "calc")  # honest
    change = take_change(repo, wt, repo.base, "t1-a", "")
    refused = {r.split(":")[0] for r in change.refused}
    assert refused == {"x", "l1", "l2", "g"}, change.refused
    assert {"sub/up", "tests/calc"} <= set(change.files)

    honest = worktree(repo, "t1-b")
    os.symlink("../calc.py", honest / "tests" / "calc")
    assert not take_change(repo, honest, repo.base, "t1-b", "").refused


def test_the_bases_own_links_are_the_users_but_a_change_that_redirects_them_is_refused(tmp_path: Path) -> None:
    """The user's repository has a link out (its own business) and `x -> s/../..` with `s -> a/b` (inside).
    A change that leaves them is not refused; one that points `s` one folder higher sends `x` out: refused."""
    repo, _ = make_repo(tmp_path, {"a/b/f": "f\n", "calc.py": "x = 1\n"})
    user = tmp_path / "user"
    os.symlink("/etc/hostname", user / "ext")
    os.symlink("a/b", user / "s")
    os.symlink("s/../..", user / "x")
    ugit(user, "add", "-A")
    ugit(user, "commit", "-qm", "links")
    repo = RunRepo.create(repo.run, user, None, False)
    same = worktree(repo)
    (same / "calc.py").write_text("x = 2\n")
    assert not take_change(repo, same, repo.base, "t1-a", "").refused
    moved = worktree(repo, "t1-b")
    (moved / "s").unlink()
    os.symlink("a", moved / "s")
    change = take_change(repo, moved, repo.base, "t1-b", "")
    assert [r.split(":")[0] for r in change.refused] == ["x"], change.refused


def test_two_changes_each_inside_that_lead_out_once_merged_do_not_land(tmp_path: Path) -> None:
    """One change points `s` higher, another adds `x -> s/../..`: each is inside on the base, together `x` leads
    out. The second to integrate is a conflict (its writer rebases, and the take refuses it then)."""
    repo, _ = make_repo(tmp_path, {"a/b/f": "f\n"})
    user = tmp_path / "user"
    os.symlink("a/b", user / "s")
    ugit(user, "add", "-A")
    ugit(user, "commit", "-qm", "link")
    repo = RunRepo.create(repo.run, user, None, False)
    first, second = worktree(repo, "t1-a"), worktree(repo, "t2-a")
    (first / "s").unlink()
    os.symlink("a", first / "s")
    os.symlink("s/../..", second / "x")
    one = take_change(repo, first, repo.base, "t1-a", "")
    two = take_change(repo, second, repo.base, "t2-a", "")
    assert not one.refused and not two.refused
    assert integrate(repo, one, []).result is IntegrationResult.LANDED
    clash = integrate(repo, two, [])
    assert clash.result is IntegrationResult.CONFLICT and "x: a link out of the tree" in clash.detail, clash


def test_orch_apply_never_delivers_a_link_that_leads_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A branch made by other means than the queue (here: by hand in the run's repository) with a chain out:
    `orch apply` refuses it and fetches nothing."""
    repo, user = make_repo(tmp_path)
    git = ["git", "--git-dir", str(repo.git_dir)]
    index = {"GIT_INDEX_FILE": str(tmp_path / "index"), **os.environ}
    subprocess.run([*git, "read-tree", repo.base], env=index, check=True)
    for path, text in (("sub/up", ".."), ("x", "sub/up/..")):
        sha = subprocess.run([*git, "hash-object", "-w", "--stdin"], input=text.encode(), capture_output=True)
        entry = f"120000,{sha.stdout.decode().strip()},{path}"
        subprocess.run([*git, "update-index", "--add", "--cacheinfo", entry], env=index, check=True)
    tree = subprocess.run([*git, "write-tree"], env=index, capture_output=True, text=True).stdout.strip()
    assert [p.split(":")[0] for p in problems(repo, tree, repo.base)] == ["x"]
    made = subprocess.run([*git, "commit-tree", tree, "-p", repo.base, "-m", "hand"], capture_output=True, text=True)
    subprocess.run([*git, "update-ref", f"refs/heads/{repo.branch}", made.stdout.strip()], check=True)
    monkeypatch.chdir(user)
    done = orch("apply", "r1")
    assert done.exit_code != 0 and "leads out of the repository" in done.output and "x: a link out" in done.output
    assert subprocess.run(["git", "rev-parse", "--verify", "-q", "orch/r1"], cwd=user).returncode != 0

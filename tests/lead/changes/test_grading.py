"""A change cannot grade itself (orch/lead/changes/grading.py): the files a check command names, the checks'
tree with every grading path as in the base, and the real runners a change tries to fool that way: unittest
(a `testx.py` its discovery imports), pytest (a conftest that turns failures into passes) and a shell script
check (rewritten to `exit 0`). Each attack works without the overlay and fails with it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orch.jobs.changes import Change
from orch.lead.changes.gate import gate_checks, sandbox_available
from orch.lead.changes.grading import Grading, check_scripts, graded_tree
from orch.lead.changes.repo import RunRepo
from orch.lead.changes.take import take_change
from orch.spec.model import DEFAULT_PROTECT
from tests.lead.changes.gitfix import (
    BROKEN_MEAN,
    RUNNER_CHECKS,
    SELF_GRADING,
    make_repo,
    run_folder,
    runner_project,
    ugit,
)

FILES = {"calc.py": "x = 1\n", "ci/check.sh": "exit 0\n", "tests/test_calc.py": "pass\n", "conftest.py": ""}


@pytest.mark.pure
@pytest.mark.parametrize(
    ("command", "subdir", "scripts"),
    [
        ("sh ci/check.sh", "", {"ci/check.sh"}),
        ("./ci/check.sh --fast && python3 -B tests/test_calc.py", "", {"ci/check.sh", "tests/test_calc.py"}),
        ("lint --rcfile=ci/check.sh calc", "", {"ci/check.sh"}),
        ("sh ../ci/check.sh", "pkg", {"ci/check.sh"}),  # from the workdir below the root
        ("make test; pytest ci 'ci/check.sh", "", {"ci/check.sh"}),  # unbalanced quotes: its words still count
        ("python3 -m unittest -q  # ci/check.sh", "", set()),  # a comment names nothing
        ("sh ci/missing.sh", "", set()),
    ],
)
def test_the_files_a_check_names_grade_it(command: str, subdir: str, scripts: set[str]) -> None:
    assert check_scripts([command], ["calc.py", "ci/check.sh", "tests/test_calc.py"], subdir) == scripts


def _change(repo: RunRepo, job: str, edits: dict[str, str | None]) -> Change:
    wt = repo.run.worktrees_dir(1) / job
    wt.mkdir(parents=True)
    repo.checkout(repo.base, wt)
    for name, text in edits.items():
        path = wt / name
        if text is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return take_change(repo, wt, repo.base, job, "")


def _tree_files(repo: RunRepo, tree: str) -> dict[str, str]:
    names = repo.files(tree)
    git = ["git", "--git-dir", str(repo.git_dir), "cat-file", "blob"]
    return {n: subprocess.run([*git, f"{tree}:{n}"], capture_output=True, text=True).stdout for n in names}


def test_the_checks_tree_takes_every_grading_path_from_the_base(tmp_path: Path) -> None:
    """Added grading paths gone (a name with a newline in its folder's too), edited and deleted ones the base's,
    a file the base had where the change made a folder back whole; the code under test the change's."""
    repo, _ = make_repo(tmp_path, {**FILES, "tests/fixtures": "data\n"})
    change = _change(
        repo,
        "t1-a",
        {
            "calc.py": "x = 2\n",
            "testx.py": "cheat\n",
            "a\nb/conftest.py": "cheat\n",
            "conftest.py": "cheat\n",
            "ci/check.sh": "cheat\n",
            "tests/test_calc.py": None,
            "tests/fixtures": None,
            "tests/fixtures/x.py": "cheat\n",
            "docs/new.md": "fine\n",
        },
    )
    assert change.tree is not None
    rules = Grading(DEFAULT_PROTECT, check_scripts(["sh ci/check.sh"], repo.files(repo.base)))
    graded = _tree_files(repo, graded_tree(repo, change.tree, rules))
    assert graded == {**FILES, "tests/fixtures": "data\n", "calc.py": "x = 2\n", "docs/new.md": "fine\n"}
    assert graded_tree(repo, repo.base, rules) == repo.base  # nothing differs from the base: as it was given


@pytest.mark.skipif(sandbox_available() is not None, reason=str(sandbox_available()))
def test_a_change_that_grades_itself_fails_unittest_pytest_and_a_script_check(tmp_path: Path) -> None:
    user = runner_project(tmp_path / "user")
    repo = RunRepo.create(run_folder("r1", workdir=user), user, None, False)
    rules = Grading.of(repo, DEFAULT_PROTECT, RUNNER_CHECKS)
    assert rules.scripts == {"check.sh"}
    cheat = _change(repo, "t1-a", {"calc.py": BROKEN_MEAN, **SELF_GRADING})
    fooled = gate_checks(repo, cheat, RUNNER_CHECKS, [])  # what it was after: every check passes
    assert [r.passed for r in fooled.results] == [True, True, True], [r.output_tail for r in fooled.results]
    graded = gate_checks(repo, cheat, RUNNER_CHECKS, [], grading=rules)
    unittest, pytest_, script = graded.results  # each fails on the broken `mean` itself
    assert "AssertionError: 0 != 2" in unittest.output_tail and "AssertionError: 0 != 2" in script.output_tail
    assert "1 failed" in pytest_.output_tail and not any(r.passed for r in graded.results), graded.results


def test_a_user_repository_with_a_newline_in_a_folder_name_is_graded_like_any(tmp_path: Path) -> None:
    """The overlay reads git's raw records NUL-separated: an odd name is one path, never two."""
    repo, user = make_repo(tmp_path, {"calc.py": "x = 1\n"})
    odd = user / "we\nird"
    odd.mkdir()
    (odd / "test_odd.py").write_text("base\n")
    ugit(user, "add", "-A")
    ugit(user, "commit", "-qm", "odd")
    repo = RunRepo.create(repo.run, user, None, False)
    change = _change(repo, "t1-a", {"we\nird/test_odd.py": "cheat\n", "calc.py": "x = 2\n"})
    assert change.tree is not None
    graded = _tree_files(repo, graded_tree(repo, change.tree, Grading(DEFAULT_PROTECT)))
    assert graded == {"calc.py": "x = 2\n", "we\nird/test_odd.py": "base\n"}

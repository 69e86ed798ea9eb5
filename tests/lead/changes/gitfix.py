"""Real git repositories for the changes tests: a user's repository, its fingerprint (every byte of .git and
of the working tree, and the index's mtime), and a run folder with the run's repository."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from orch.lead.changes.repo import RunRepo
from orch.run.folder import RunFolder
from tests.helpers import run_info

ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "u",
    "GIT_AUTHOR_EMAIL": "u@x",
    "GIT_COMMITTER_NAME": "u",
    "GIT_COMMITTER_EMAIL": "u@x",
}


def ugit(repo: Path, *args: str) -> str:
    """git as the user runs it in their repository."""
    done = subprocess.run(["git", *args], cwd=repo, env=ENV, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def user_repo(root: Path, files: dict[str, str] | None = None) -> Path:
    """A user's repository with one commit of `files` (default: a small package with a test; `{}`: what `root`
    holds already)."""
    root.mkdir(parents=True, exist_ok=True)
    if files is None:
        files = {
            "calc.py": "def add(a, b):\n    return a - b\n",
            "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n",
            "README.md": "calc\n",
        }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    ugit(root, "init", "-q", "-b", "main")
    ugit(root, "add", "-A")
    ugit(root, "commit", "-qm", "first")
    return root


def fingerprint(repo: Path) -> dict[str, str]:
    """Every file under the repository (.git included) by content, plus .git/index's mtime: equal before and
    after means nothing was written (no object, ref, index refresh or working-tree change)."""
    out = {}
    for path in sorted(repo.rglob("*")):
        rel = str(path.relative_to(repo))
        if path.is_symlink():
            out[rel] = "-> " + os.readlink(path)
        elif path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[rel] = "dir"
    index = repo / ".git" / "index"
    if index.exists():
        out["index-mtime"] = str(index.stat().st_mtime_ns)
    return out


def run_folder(name: str = "r1", workers: int = 2, workdir: Path | None = None) -> RunFolder:
    run = RunFolder.for_name(name)
    run.create(run_info(name, workers=workers, workdir=str(workdir or "/workspace"), writers=True))
    return run


def make_repo(tmp: Path, files: dict[str, str] | None = None, name: str = "r1") -> tuple[RunRepo, Path]:
    """A run with its repository made from a fresh user repository; (repo, the user's repository)."""
    user = user_repo(tmp / "user", files)
    run = run_folder(name, workdir=user)
    return RunRepo.create(run, user, None, False), user


RUNNER_PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py.py")
"""pytest and what it imports, as this venv has them: a project vendors them so its checks' `python3` (the system's,
in the sandbox: the venv may be under a home the sandbox hides) runs the real pytest."""


def vendor_pytest(dest: Path) -> None:
    """pytest's sources (no bytecode) into `dest` (PYTHONPATH=dest python3 -m pytest)."""
    site = Path(pytest.__file__).resolve().parents[1]
    dest.mkdir(parents=True)
    for name in RUNNER_PACKAGES:
        if (site / name).is_dir():
            shutil.copytree(site / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(site / name, dest / name)


def runner_project(root: Path, with_pytest: bool = True) -> Path:
    """A project whose tests unittest, pytest (vendored, `with_pytest`) and a shell script each run."""
    if with_pytest:
        vendor_pytest(root / "vendor")
    test = (
        "import unittest\n\nfrom calc import mean\n\n\nclass TestMean(unittest.TestCase):\n"
        "    def test_mean(self):\n        self.assertEqual(mean([1, 2, 3]), 2)\n"
    )
    files = {"calc.py": "def mean(v):\n    return sum(v) / len(v)\n", "test_calc.py": test, "conftest.py": ""}
    files["check.sh"] = "python3 -B -m unittest -q test_calc\n"
    return user_repo(root, files)


PYTEST = "PYTHONPATH=vendor python3 -B -m pytest -q -p no:cacheprovider"
RUNNER_CHECKS = ["python3 -B -m unittest -q", PYTEST, "sh check.sh"]
BROKEN_MEAN = "def mean(v):\n    return 0\n"
"""A change that breaks `mean`: each check fails on it, unless the change grades itself."""
SELF_GRADING = {
    # unittest's discovery imports every test*.py before it runs a test: this one makes every assertion pass.
    "testx.py": "import unittest\n\nunittest.TestCase.assertEqual = lambda *a, **k: None\n",
    # pytest loads conftest.py before collecting: every report becomes a pass.
    "conftest.py": "import pytest\n\n\n@pytest.hookimpl(wrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
    "    report = yield\n    report.outcome = 'passed'\n    return report\n",
    # the check's own script.
    "check.sh": "exit 0\n",
}
"""How a change makes its own checks pass, one way per runner (each of `runner_project`'s checks runs one)."""

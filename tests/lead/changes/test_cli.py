"""`orch run` with writer tasks refuses bad input in one line, creating nothing; `orch apply` fetches the landed
branch into the user's repository and writes nothing else there."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from orch.lead.changes.gate import sandbox_available
from orch.lead.changes.queue import integrate
from orch.lead.changes.start import prepare
from orch.run.paths import runs_dir
from orch.spec.load import load_spec
from tests.helpers import orch
from tests.lead.changes.gitfix import fingerprint, make_repo, run_folder, ugit, user_repo
from tests.lead.changes.test_queue import edit


def spec_file(
    folder: Path, workdir: Path, checks: list[str] | None = None, role: str = "writer", **extra: object
) -> Path:
    spec = {
        "name": "w",
        "workdir": str(workdir),
        "agent": "scripted",
        "offline": True,
        "tasks": [{"id": "t1", "role": role, "goal": "make add add", **extra}],
        "checks": checks or [],
    }
    path = folder / "fleet.yaml"
    path.write_text(json.dumps(spec))
    return path


def nothing_created() -> None:
    left = list(runs_dir().iterdir()) if runs_dir().exists() else []
    assert left == [], left


@pytest.mark.parametrize(
    ("setup", "args", "checks", "words"),
    [
        ("plain", [], None, "is not in a git repository"),
        ("dirty", [], None, "uncommitted change(s)"),
        ("clean", ["--base", "v9.9"], None, "--base v9.9: no such revision"),
        ("clean", [], ["true", "no-such-tool -q"], "check 'no-such-tool -q' does not exist"),
        ("finder", ["--base", "HEAD"], None, "--base and --snapshot are for specs with writer tasks"),
    ],
)
def test_bad_input_one_line_exit_2_nothing_created(
    tmp_path: Path, setup: str, args: list[str], checks: list[str] | None, words: str
) -> None:
    work = tmp_path / "work"
    if setup == "plain":
        work.mkdir()
        (work / "calc.py").write_text("x\n")
    else:
        user_repo(work)
    if setup == "dirty":
        (work / "calc.py").write_text("dirty\n")
    before = fingerprint(work)
    spec = spec_file(tmp_path, work, checks, role="finder" if setup == "finder" else "writer")
    result = orch("run", spec, "--local", *args)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("orch: error:")]
    assert len(errors) == 1 and words in errors[0], result.output
    nothing_created()
    assert fingerprint(work) == before


def test_globs_that_match_nothing_are_a_warning(tmp_path: Path) -> None:
    work = user_repo(tmp_path / "work")
    spec = load_spec(spec_file(tmp_path, work, allow=["tests/test_calc.py", "nowhere/*.py"]))
    spec = spec.model_copy(update={"protect": ["+docs/**", "calc.py"]})
    prepared = prepare(spec, "w", None, False, checks_here=True)
    try:
        assert prepared.warnings == [
            "protect: 'docs/**' matches no file of the base",
            "tasks t1 allow: 'nowhere/*.py' matches no file of the base (a new file may still match)",
        ]
    finally:
        prepared.discard()
    nothing_created()


def test_orch_apply_fetches_a_new_branch_and_touches_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, user = make_repo(tmp_path)
    change = edit(repo, "t1-a", 1, {"calc.py": "def add(a, b):\n    return a + b\n"})
    landed = integrate(repo, change, [])
    ugit(user, "status")
    (user / "scratch.txt").write_text("the user's own work in progress\n")
    before = fingerprint(user)
    current = ugit(user, "symbolic-ref", "HEAD")

    monkeypatch.chdir(tmp_path)
    outside = orch("apply", "r1")
    assert outside.exit_code == 2 and "is not in run r1's repository" in outside.output

    monkeypatch.chdir(user / "tests")
    done = orch("apply", "r1")
    assert done.exit_code == 0, done.output
    assert ugit(user, "rev-parse", "orch/r1") == landed.commit
    assert ugit(user, "symbolic-ref", "HEAD") == current
    after = fingerprint(user)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    # Only the new objects and the new branch's ref (or packed-refs) appear; the tree, index and HEAD stay.
    assert all(k.startswith((".git/objects/", ".git/refs/heads/orch", ".git/logs/refs/heads/orch")) for k in changed), (
        changed
    )
    assert (user / "scratch.txt").exists() and (user / "calc.py").read_text().endswith("a - b\n")

    again = orch("apply", "r1")
    assert again.exit_code == 2 and "already exists" in again.output
    other = orch("apply", "r1", "--branch", "fixes/calc")
    assert other.exit_code == 0 and ugit(user, "rev-parse", "fixes/calc") == landed.commit
    bad = orch("apply", "r1", "--branch", "no..good")
    assert bad.exit_code == 2 and "not a valid branch name" in bad.output


@pytest.mark.skipif(sandbox_available() is not None, reason=str(sandbox_available()))
def test_a_check_failing_on_the_base_is_a_warning(tmp_path: Path) -> None:
    work = user_repo(tmp_path / "work")
    spec = load_spec(spec_file(tmp_path, work, ["grep -q 'a + b' calc.py", "test -f calc.py"]))
    prepared = prepare(spec, "w", None, False, checks_here=True)
    try:
        assert prepared.baseline is not None and [r.exit_code for r in prepared.baseline.results] == [1, 0]
        assert prepared.warnings == [
            "check \"grep -q 'a + b' calc.py\" fails on the base (exit 1: ): it cannot gate any change"
        ]
    finally:
        prepared.discard()
    # compose's `orch run --prepare` (no capability to start the checks' uid): its controller runs them.
    deferred = prepare(spec, "w", None, False, checks_here=False)
    try:
        assert deferred.baseline is None and deferred.warnings == []
    finally:
        deferred.discard()
    nothing_created()


@pytest.mark.skipif(os.getuid() != 0, reason="only root makes a run folder for another uid")
def test_installed_repository_belongs_to_the_run_folders_owner(tmp_path: Path) -> None:
    """A container run started as root: the run folder is the container uid's, and so is its repository."""
    work = user_repo(tmp_path / "work")
    spec = load_spec(spec_file(tmp_path, work))
    prepared = prepare(spec, "w", None, False, checks_here=False)
    run = run_folder("w", workdir=work)
    os.chown(run.root, 1000, 1000)
    prepared.install(run)
    assert {p.stat().st_uid for p in [run.repo_dir, *run.repo_dir.rglob("*"), run.repo_info]} == {1000}
    assert prepared.baseline is None  # a container run's checks run in the container


@pytest.mark.skipif(os.getuid() != 0, reason="needs a run repository of another uid")
def test_orch_apply_reads_a_run_repository_of_another_uid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A container run's repository is the container uid's: git's ownership check must not refuse it."""
    repo, user = make_repo(tmp_path)
    landed = integrate(repo, edit(repo, "t1-a", 1, {"calc.py": "fixed\n"}), [])
    for path in [repo.git_dir, *repo.git_dir.rglob("*")]:
        os.chown(path, 1000, 1000, follow_symlinks=False)
    monkeypatch.chdir(user)
    done = orch("apply", "r1")
    assert done.exit_code == 0, done.output
    assert ugit(user, "rev-parse", "orch/r1") == landed.commit

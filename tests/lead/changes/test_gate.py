"""The gate: checks in the controller's sandbox (real bubblewrap), regressions against the base, the scope."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest

from orch.errors import UsageError
from orch.lead.changes import gate
from orch.lead.changes.gate import baseline, gate_checks, regressions, run_checks, sandbox_available
from orch.lead.changes.records import Change, CheckResult
from orch.lead.changes.scope import matches, scope_violations, unmatched_globs
from orch.lead.changes.take import take_change
from orch.lead.spec import DEFAULT_PROTECT
from orch.waits import wait_until
from tests.lead.changes.gitfix import make_repo

pytestmark = pytest.mark.skipif(sandbox_available() is not None, reason=str(sandbox_available()))


def one(command: str, tree: Path, **kw: float) -> CheckResult:
    return run_checks([command], tree, **kw)[0]  # type: ignore[arg-type]


def test_a_check_sees_its_copy_and_nothing_else(tmp_path: Path, orch_home: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("hello\n")
    secret = orch_home / "runs" / "r" / "secret"
    secret.parent.mkdir(parents=True)
    secret.write_text("s")
    outside = tmp_path / "outside.txt"
    assert one("cat a.txt && echo made > b.txt", tree).exit_code == 0
    assert (tree / "b.txt").read_text() == "made\n"
    assert one(f"cat {secret}", tree).exit_code != 0  # ORCH_HOME is hidden
    assert (
        one(f"ls {Path.home()}/.ssh {Path.home()}/.claude 2>&1; ls -A {Path.home()} | wc -l", tree)
        .output_tail.strip()
        .endswith("0")
    )
    assert one(f"touch {outside}", tree).exit_code != 0 and not outside.exists()
    assert one("touch /usr/evil", tree).exit_code != 0
    assert one("env", tree).output_tail.count("\n") <= 8  # a clean environment: no credential variables
    assert "ORCH_HOME" not in one("env", tree).output_tail


def test_a_check_has_no_network(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    result = one("python3 -c \"import socket; s=socket.socket(); s.settimeout(3); s.connect(('1.1.1.1', 53))\"", tree)
    assert result.exit_code != 0 and "unreachable" in result.output_tail.lower()
    ifaces = one("cat /proc/net/dev", tree).output_tail
    assert "lo:" in ifaces and "eth0" not in ifaces


def test_time_and_output_limits(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    started = time.monotonic()
    slow = one("sleep 0.1; (sleep 300 &) ; sleep 300", tree, timeout=1.0)
    assert slow.timed_out and slow.exit_code is None and not slow.passed
    assert time.monotonic() - started < 30
    flood = one("yes orch | head -c 3000000; echo; echo THE-END", tree, output_bytes=2048)
    assert flood.exit_code == 0 and flood.output_bytes > 3_000_000
    assert len(flood.output_tail) <= 2048 and flood.output_tail.rstrip().endswith("THE-END")


FORKER = (
    "import os, time\nwhile True:\n    try:\n        os.fork() or time.sleep(86394)\n    except OSError:\n        pass"
)
BOMB = f"python3 -c '{FORKER}'"
"""Forks without end, each child kept alive, the parent trying again when refused (a shell's bomb dies at the cap)."""


def test_a_fork_bomb_in_a_check_is_capped_and_ends_with_its_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change whose check forks without end: it stops at the check's process cap (a small one here), this
    process (the controller's) can still start processes meanwhile, and the timeout ends it with nothing left."""
    monkeypatch.setattr(gate, "CHECK_PIDS", 48)
    tree = tmp_path / "tree"
    tree.mkdir()
    results: list[CheckResult] = []
    thread = threading.Thread(target=lambda: results.extend(run_checks([BOMB], tree, timeout=3.0)))
    thread.start()

    def bombs() -> int:
        return sum(1 for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["python3", "-c", FORKER])

    peak = 0
    try:
        wait_until(lambda: bombs() > 8, 20, "the bomb to fork")
        while thread.is_alive():
            peak = max(peak, bombs())
            assert subprocess.run(["true"], check=False).returncode == 0  # the controller still forks
    finally:
        thread.join(60)
    assert 8 < peak <= 48, peak
    (result,) = results
    assert result.timed_out and not result.passed
    wait_until(lambda: bombs() == 0, 10, "the bomb's processes to be gone")


def test_a_check_that_does_not_exist_is_refused_on_the_base(tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path)
    with pytest.raises(UsageError) as err:
        baseline(repo, ["true", "no-such-checker --all"])
    assert "'no-such-checker --all' does not exist" in err.value.message
    assert not repo.run.base_checks.exists()


def test_a_check_that_passed_on_the_base_must_still_pass(tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path)
    checks = ["grep -q 'a + b' calc.py", "test -f README.md", "grep -q never calc.py"]
    base = baseline(repo, checks)
    assert [r.exit_code for r in base.results] == [1, 0, 1] and repo.run.base_checks.exists()
    wt = tmp_path / "wt"
    wt.mkdir()
    repo.checkout(repo.base, wt)
    (wt / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (wt / "README.md").unlink()
    change = take_change(repo, wt, repo.base, "t1-a", "")
    record = gate_checks(repo, change, checks, base.results)
    assert [r.exit_code for r in record.results] == [0, 1, 1]
    assert record.regressions == ["test -f README.md"]  # the third failed on the base: not a regression
    assert (repo.run.change_dir("t1-a") / "checks.json").exists()


def test_regressions_table() -> None:
    def r(cmd: str, code: int | None) -> CheckResult:
        return CheckResult(command=cmd, exit_code=code, seconds=0, timed_out=code is None)

    assert regressions([r("a", 0), r("b", 1)], [r("a", 1), r("b", 1)]) == ["a"]
    assert regressions([r("a", 0)], [r("a", None)]) == ["a"]
    assert regressions([r("a", 0)], [r("a", 0)]) == []


@pytest.mark.parametrize(
    ("path", "protected"),
    [
        ("tests/test_calc.py", True),
        ("src/pkg/tests/helpers.py", True),
        ("test_x.py", True),
        ("pkg/test_y.py", True),
        ("pkg/y_test.py", True),
        ("conftest.py", True),
        ("sub/conftest.py", True),
        ("pyproject.toml", True),
        (".github/workflows/ci.yml", True),
        ("package.json", True),
        ("calc.py", False),
        ("docs/testing.md", False),
        ("pkg/contest.py", False),
    ],
)
def test_default_protect(path: str, protected: bool) -> None:
    assert any(matches(path, g) for g in DEFAULT_PROTECT) is protected


def test_scope() -> None:
    change = Change(job="j", task="t", writer=1, agent="a", base="b", tree="t", files=["calc.py", "tests/test_calc.py"])
    assert scope_violations(change, DEFAULT_PROTECT, []) == [
        "tests/test_calc.py: protected (tests/**) and not allowed by the task"
    ]
    assert scope_violations(change, DEFAULT_PROTECT, ["tests/test_calc.py"]) == []
    refused = change.model_copy(update={"refused": ["x: a symbolic link out of the tree (-> /etc)"]})
    assert scope_violations(refused, [], []) == ["x: a symbolic link out of the tree (-> /etc)"]
    # A workdir below the repository's top: globs match from there too.
    sub = change.model_copy(update={"files": ["pkg/tests/t.py", "pkg/x.py"]})
    assert scope_violations(sub, ["tests/**"], [], subdir="pkg") == [
        "pkg/tests/t.py: protected (tests/**) and not allowed by the task"
    ]
    assert unmatched_globs(["calc.py", "tests/test_calc.py"], ["tests/**", "nothing/**"]) == ["nothing/**"]

"""The gate: checks in the controller's sandbox (real bubblewrap), regressions against the base, the scope."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orch import procs
from orch.backends.base import ChecksSandbox
from orch.errors import UsageError
from orch.jobs.changes import Change, CheckResult
from orch.lead.changes import gate, uidchecks
from orch.lead.changes.checkwatch import CheckLimits
from orch.lead.changes.gate import baseline, gate_checks, regressions, run_checks, sandbox_available
from orch.lead.changes.grading import Grading, matches
from orch.lead.changes.scope import scope_violations, unmatched_globs
from orch.lead.changes.take import take_change
from orch.procs import of_uids
from orch.run.paths import agents_dir
from orch.run.uids import checks_uid, drop_argv, worker_uid
from orch.spec.model import DEFAULT_PROTECT
from orch.waits import wait_until
from tests.helpers import own_processes
from tests.lead.changes.gitfix import make_repo
from tests.lead.desks import parts

pytestmark = pytest.mark.skipif(sandbox_available() is not None, reason=str(sandbox_available()))


def one(command: str, tree: Path, **limits: Any) -> CheckResult:
    return run_checks([command], tree, limits=CheckLimits(**limits))[0]


def test_a_check_sees_its_copy_and_nothing_else(tmp_path: Path, orch_home: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("hello\n")
    secret = orch_home / "runs" / "r" / "secret"
    secret.parent.mkdir(parents=True)
    secret.write_text("s")
    agents_dir().mkdir(parents=True, exist_ok=True)  # hidden below a hidden folder: both empty, read-only
    outside = tmp_path / "outside.txt"
    assert one("cat a.txt && echo made > b.txt && cat b.txt", tree).output_tail == "hello\nmade\n"
    assert not (tree / "b.txt").exists()  # it wrote its own copy: the controller's checkout stays as taken
    assert one("touch a.txt", tree).exit_code == 0 and one("test -f b.txt", tree).exit_code == 1  # a fresh copy each
    assert one(f"cat {secret}", tree).exit_code != 0  # ORCH_HOME is hidden
    assert (
        one(f"ls {Path.home()}/.ssh {Path.home()}/.claude 2>&1; ls -A {Path.home()} | wc -l", tree)
        .output_tail.strip()
        .endswith("0")
    )
    assert one(f"touch {outside}", tree).exit_code != 0 and not outside.exists()
    assert one(f"ls -A {orch_home} {agents_dir()}; touch {orch_home}/x {agents_dir()}/x", tree).exit_code != 0
    assert one(f"ls -A {agents_dir()} 2>/dev/null | wc -l", tree).output_tail.strip() == "0"
    assert one("touch /usr/evil", tree).exit_code != 0
    assert one("env", tree).output_tail.count("\n") <= 8  # a clean environment: no credential variables
    assert "ORCH_HOME" not in one("env", tree).output_tail


def test_a_check_reaches_its_tree_by_path(tmp_path: Path) -> None:
    """unittest and pytest stat the working folder by its path: as root a check runs as the checks' uid, which
    the tree's parent in the sandbox once shut out (bwrap makes it 0700)."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("hello\n")
    assert one('test -d "$(pwd)" && cat "$(pwd)/a.txt"', tree).exit_code == 0


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
    thread = threading.Thread(target=lambda: results.extend(run_checks([BOMB], tree, limits=CheckLimits(timeout=3))))
    thread.start()

    def bombs() -> int:
        return len(own_processes(["python3", "-c", FORKER]))

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
        ("testx.py", True),  # unittest discovers test*.py
        ("pkg/tests.py", True),
        (".pytest.ini", True),
        ("pytest.toml", True),
        ("sub/.pytest.toml", True),
        ("sitecustomize.py", True),
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
    assert scope_violations(sub, Grading(("tests/**",), subdir="pkg"), []) == [
        "pkg/tests/t.py: protected (tests/**) and not allowed by the task"
    ]
    # A name with a newline in a folder's name is matched like any other (it once escaped every glob), and named
    # quoted; a file a check names is protected with no glob.
    odd = change.model_copy(update={"files": ["a\nb/testx.py", "x\ny/conftest.py", "ci/check.sh", "ci/other.sh"]})
    rules = Grading(DEFAULT_PROTECT, frozenset({"ci/check.sh"}))
    assert scope_violations(odd, rules, []) == [
        "'a\\nb/testx.py': protected (test*.py) and not allowed by the task",
        "'x\\ny/conftest.py': protected (conftest.py) and not allowed by the task",
        "ci/check.sh: protected (a check runs it) and not allowed by the task",
    ]
    assert scope_violations(odd, rules, ["**"]) == []
    assert unmatched_globs(["calc.py", "tests/test_calc.py"], ["tests/**", "nothing/**"]) == ["nothing/**"]


@pytest.fixture
def uid_checks(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """The uid sandbox's path (a run's container) taken here, as root: the checks', a worker's and the run's
    processes, each a `sleep` in a session of its own (as a check's `timeout` is), on uids of this test alone."""
    if os.geteuid() != 0:
        pytest.skip("starting processes as other uids needs root")
    base = 3_000_000 + (os.getpid() % 10_000) * 100  # uids no other test process uses
    monkeypatch.setenv("ORCH_WORKER_UID_BASE", str(base))
    monkeypatch.setattr(gate, "_sandbox", lambda host: (ChecksSandbox.OWN_UID, None))  # what a container's probe finds
    owners = {"checks": checks_uid(), "worker": worker_uid(1), "run": os.getuid()}
    started = {
        who: subprocess.Popen([*drop_argv(uid, uid), "sleep", "600"], start_new_session=True)
        for who, uid in owners.items()
    }
    wait_until(lambda: set(of_uids(set(owners.values())).values()) == set(owners.values()), 20, "all to start")
    try:
        yield {who: proc.pid for who, proc in started.items()}
    finally:
        for proc in started.values():
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("through_tmux", [False, True])
def test_a_killed_controllers_leftover_check_is_stopped_and_nothing_else(
    uid_checks: dict[str, int], through_tmux: bool, monkeypatch: pytest.MonkeyPatch, tmux_tmpdir: Path
) -> None:
    socket = None
    if through_tmux:  # a container's controller holds no capability: the run's tmux server kills for it
        monkeypatch.setattr(uidchecks, "can_switch", lambda uid: False)
        socket = "ctrchecks"
        subprocess.run(["tmux", "-L", socket, "-f", "/dev/null", "new-session", "-d", "sleep 600"], check=True)
    try:
        assert gate.stop_leftover_checks(gate.Host(socket)) == [uid_checks["checks"]]
        wait_until(lambda: not procs.alive(uid_checks["checks"]), 20, "the leftover check to die")
        assert procs.alive(uid_checks["worker"]) and procs.alive(uid_checks["run"])  # no other uid's process
        assert gate.stop_leftover_checks(gate.Host(socket)) == []  # nothing left: nothing to do
    finally:
        if socket is not None:
            subprocess.run(["tmux", "-L", socket, "kill-server"], check=False)


def test_no_leftover_check_is_looked_for_under_bubblewrap(
    uid_checks: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A machine's run: its sandboxes die whole.
    monkeypatch.setattr(gate, "_sandbox", lambda host: (ChecksSandbox.BWRAP, None))
    assert gate.stop_leftover_checks(gate.NO_RUN) == []
    assert procs.alive(uid_checks["checks"])


def test_a_starting_controller_stops_leftover_checks_and_says_so(uid_checks: dict[str, int], tmp_path: Path) -> None:
    """What the controller does on (re)start, before any check (orch.lead.controller.Controller.reconcile)."""
    run = parts(tmp_path, checks=["true"])
    run.review.writing.stop_leftover_checks()
    wait_until(lambda: not procs.alive(uid_checks["checks"]), 20, "the leftover check to die")
    assert [e["data"]["pids"] for e in run.events("checks-leftover-stopped")] == [[uid_checks["checks"]]]
    assert procs.alive(uid_checks["worker"])


NO_USERNS = "bwrap: setting up uid map: Permission denied"


def _bwrap_until(tmp_path: Path, broken: Path) -> Path:
    """A bubblewrap that works (the real one) until `broken` exists, then fails as one without user namespaces."""
    real = shutil.which("bwrap")
    assert real is not None
    fake = tmp_path / "bwrap"
    fake.write_text(f'#!/bin/sh\n[ -e {broken} ] || exec {real} "$@"\necho "{NO_USERNS}" >&2\nexit 1\n')
    fake.chmod(0o755)
    return fake


def test_a_sandbox_that_cannot_be_made_is_an_error_not_a_failing_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Never a check's failure ("fails on the base ..."): the error says the sandbox cannot be made and how to fix it,
    whether bubblewrap fails from the start (never taken as working) or stops working under a run."""
    broken = tmp_path / "broken"
    monkeypatch.setenv("ORCH_BWRAP", str(_bwrap_until(tmp_path, broken)))
    tree = tmp_path / "tree"
    tree.mkdir()
    assert sandbox_available() is None
    assert one("true", tree).passed
    broken.touch()  # user namespaces turned off under the run
    with pytest.raises(UsageError) as gone:
        one("true", tree)
    assert f"could not make its namespaces: {NO_USERNS}" in gone.value.one_line()
    assert "unprivileged user namespaces" in gone.value.one_line()
    assert sandbox_available() is not None  # tried again, not taken from before
    with pytest.raises(UsageError, match="the checks' sandbox cannot be made"):
        gate.sandbox_kind()
    broken.unlink()
    assert sandbox_available() is None  # and working again once fixed


def test_a_check_that_only_prints_bubblewraps_words_is_its_own_failure(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    result = one(f"echo '{NO_USERNS}'; exit 1", tree)
    assert not result.passed and result.exit_code == 1


def test_a_sandbox_that_fails_to_be_made_once_runs_its_check_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bubblewrap failing once (as it did under load: "bwrap: ...: Invalid argument", exit 1) while the probe still
    works: the check ran not at all, so it runs again, and its own result is the one kept."""
    real = shutil.which("bwrap")
    assert real is not None
    calls = tmp_path / "calls"
    fake = tmp_path / "bwrap"  # its second call (the check's, after the probe's) fails
    fake.write_text(
        f'#!/bin/sh\necho >> {calls}\n[ "$(wc -l < {calls})" -eq 2 ] || exec {real} "$@"\n'
        'echo "bwrap: Can\'t mount proc on /newroot/proc: Invalid argument" >&2\nexit 1\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("ORCH_BWRAP", str(fake))
    tree = tmp_path / "tree"
    tree.mkdir()
    result = one("echo checked; exit 3", tree)
    assert (result.exit_code, result.output_tail) == (3, "checked\n")
    assert len(calls.read_text().splitlines()) == 4  # the probe, the failed check, the probe again, the check

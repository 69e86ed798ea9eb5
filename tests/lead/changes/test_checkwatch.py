"""A check held to its caps (orch/lead/changes/checkwatch.py) in the real bubblewrap sandbox: memory (watched), disk
(each writable place a tmpfs of the cap's size, their sum and what the check holds unnamed watched), nothing on
the host's disk; and as root a uid per check, so one check's fork bomb starves no other check beside it (the
container's uid sandbox: tests/lead/changes/test_container_checks.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from orch import procs
from orch.backends.base import ChecksSandbox
from orch.errors import UsageError
from orch.jobs.changes import CheckResult
from orch.lead.changes import gate
from orch.lead.changes.checkwatch import CheckLimits, owned
from orch.lead.changes.gate import baseline, run_checks, sandbox_available
from orch.lead.changes.stopper import ChecksStopped, Stopper
from orch.run.uids import checks_uid
from orch.waits import wait_until
from tests.helpers import own_processes
from tests.lead.changes.gitfix import make_repo

MIB = 1 << 20
needs_sandbox = pytest.mark.skipif(sandbox_available() is not None, reason=str(sandbox_available()))


@pytest.mark.pure
@pytest.mark.parametrize(
    ("memory", "disk", "over"),
    [(10, 10, None), (11, 0, "memory cap: resident memory 11 bytes (cap 10 bytes)"), (0, 11, "disk cap: 11 bytes")],
)
def test_which_cap_a_check_is_past(memory: int, disk: int, over: str | None) -> None:
    said = CheckLimits(memory=10, disk=10).over(memory, disk)
    assert (said is None) if over is None else (said is not None and over in said)
    assert CheckLimits(memory=None, disk=None).over(1 << 40, 1 << 40) is None


def one(command: str, tree: Path, **limits: int | float | None) -> CheckResult:
    return run_checks([command], tree, limits=CheckLimits(**limits))[0]  # type: ignore[arg-type]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    path = tmp_path / "tree"
    path.mkdir()
    (path / "a.txt").write_text("hello\n")
    return path


FILL = 'python3 -c \'import sys; open(sys.argv[1], "wb").write(b"x" * (int(sys.argv[2]) << 20))\''


@needs_sandbox
def test_a_check_past_its_memory_or_disk_cap_is_stopped_and_fails(tree: Path) -> None:
    started = time.monotonic()
    hog = one("python3 -c 'import time; b = b\"x\" * (300 << 20); time.sleep(60)'", tree, memory=64 * MIB)
    assert hog.stopped.startswith("over the checks' memory cap") and hog.exit_code is None and not hog.passed
    assert "[orch] stopped: over the checks' memory cap" in hog.output_tail
    # One file past the cap: the kernel refuses it (its tmpfs is the cap's size); the check fails on its own.
    big = one(f"{FILL} /tmp/big 80", tree, disk=64 * MIB)
    assert big.exit_code not in (0, None) and "No space left" in big.output_tail
    # Within the cap in each place, past it together: stopped. So is memory held in a memfd, which no RSS shows.
    spread = f"{FILL} /tmp/a 40 && {FILL} /dev/shm/b 40 && {FILL} /var/tmp/c 40 && sleep 60"
    assert one(spread, tree, disk=64 * MIB).stopped.startswith("over the checks' disk cap")
    memfd = "import os, time; f = os.memfd_create('x'); os.write(f, b'x' * (100 << 20)); time.sleep(60)"
    assert one(f'python3 -c "{memfd}"', tree, disk=64 * MIB, memory=1 << 30).stopped.startswith("over the checks' disk")
    assert time.monotonic() - started < 60  # each stopped at once, never at its timeout
    assert sorted(p.name for p in tree.iterdir()) == ["a.txt"]


@needs_sandbox
def test_a_tree_that_does_not_fit_the_disk_cap_is_refused_on_the_base(tmp_path: Path) -> None:
    """A misjudged cap must not turn every check into a failure on the base (which would gate nothing)."""
    repo, _ = make_repo(tmp_path, {"big.bin": "x" * (3 * MIB), "calc.py": "x = 1\n"})
    with pytest.raises(UsageError, match="cannot run on the base"):
        baseline(repo, ["true"], limits=CheckLimits(disk=2 * MIB))
    assert baseline(repo, ["true"], limits=CheckLimits(disk=8 * MIB)).results[0].passed


@needs_sandbox
@pytest.mark.skipif(os.geteuid() != 0, reason="as root each check runs as a uid of the machine")
def test_one_checks_fork_bomb_starves_no_other_check(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As root each check leases a uid of its own, so RLIMIT_NPROC counts its processes alone: a check beside a
    bomb at its cap still forks (with one uid for all, it could not: the bomb held the uid's whole count)."""
    monkeypatch.setattr(gate, "CHECK_PIDS", 48)
    forker = "import os, time\nwhile True:\n    try:\n        os.fork() or time.sleep(86393)\n"
    forker += "    except OSError:\n        time.sleep(0.01)"
    stopper = Stopper()

    def bomb() -> None:
        with contextlib.suppress(ChecksStopped):  # how it ends: stopped below, no result
            run_checks([f"python3 -c '{forker}'"], tree, limits=CheckLimits(timeout=60), stopper=stopper)

    bombing = threading.Thread(target=bomb)
    bombing.start()

    def bombs() -> list[psutil.Process]:
        return own_processes(["python3", "-c", forker])

    try:
        wait_until(lambda: len(bombs()) >= 40, 20, "the bomb to reach its cap")
        uids = {p.uids().real for p in bombs()}
        beside = one("for i in $(seq 12); do sh -c 'sleep 0.2' & done; wait; id -u", tree, timeout=20)
        assert beside.passed, beside.output_tail
        assert int(beside.output_tail.split()[-1]) not in uids
    finally:
        stopper.stop()  # the bomb's sandbox killed whole (run_checks ends with ChecksStopped on its thread)
        bombing.join(60)
    wait_until(lambda: not bombs(), 20, "the bomb's processes to be gone")


@pytest.mark.skipif(os.geteuid() != 0, reason="the uid sandbox's path needs root here (a strict run's SETUID there)")
def test_the_checks_uid_past_a_cap_is_stopped_and_leaves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The container's sandbox (the checks as their own uid, its copy of the tree in the /tmp it shares with the
    controller), taken here as root: a memory hog, files past the disk cap together, one file past it (the
    kernel's RLIMIT_FSIZE); each stopped or refused, and nothing of the uid is left running or on /tmp."""
    monkeypatch.setenv("ORCH_WORKER_UID_BASE", str(3_100_000 + (os.getpid() % 10_000) * 100))
    monkeypatch.setattr(gate, "_sandbox", lambda host: (ChecksSandbox.OWN_UID, None))
    work = Path(tempfile.mkdtemp(prefix="orch-uidcaps-", dir="/tmp"))  # pytest's own tmp is root's alone: 0700
    try:
        tree = work / "tree"
        tree.mkdir()
        (tree / "a.txt").write_text("hello\n")
        hog = "python3 -c 'import time; b = b\"x\" * (200 << 20); time.sleep(60)'"
        spread = "head -c 20M /dev/zero > a && head -c 20M /dev/zero > b && sleep 60"
        big = "head -c 40M /dev/zero > big"
        limits = CheckLimits(timeout=60, memory=64 * MIB, disk=32 * MIB)
        started = time.monotonic()
        hogged, spread_out, too_big = run_checks([hog, spread, big], tree, limits=limits)
        assert time.monotonic() - started < 40
        assert hogged.stopped.startswith("over the checks' memory cap"), hogged
        assert spread_out.stopped.startswith("over the checks' disk cap"), spread_out
        assert not too_big.passed and "File size limit" in too_big.output_tail + str(too_big.exit_code), too_big
        wait_until(lambda: not procs.of_uids({checks_uid()}), 20, "the checks' uid to have no process left")
        assert owned(Path("/tmp"), checks_uid()) == 0
        assert sorted(p.name for p in tree.iterdir()) == ["a.txt"]
    finally:
        shutil.rmtree(work, ignore_errors=True)

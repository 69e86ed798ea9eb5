"""The controller's check pool: work off the loop, at most `slots` at once, what ended picked up through a pipe
the loop waits on, and a close that kills a running check's sandbox (real bubblewrap) and leaves no process."""

from __future__ import annotations

import select
import threading
from pathlib import Path

import pytest

from orch.backends.base import ChecksSandbox
from orch.jobs.changes import CheckResult
from orch.lead.changes import checkpool, gate
from orch.lead.changes.checkpool import CheckPool, Ended
from orch.lead.changes.checkwatch import CheckLimits
from orch.lead.changes.gate import run_checks, sandbox_available
from orch.lead.changes.stopper import Stopper
from orch.waits import wait_until
from tests.helpers import own_processes


def _wait_ended(pool: CheckPool[str], count: int) -> list[Ended[str]]:
    out: list[Ended[str]] = []

    def got() -> bool:
        select.select([pool.fd], [], [], 1.0)  # what the loop waits on
        out.extend(pool.take())
        return len(out) >= count

    wait_until(got, 30, f"{count} piece(s) of work to end")
    return out


def test_work_ends_through_the_pipe_and_an_error_is_the_works_own() -> None:
    pool: CheckPool[str] = CheckPool(2)
    release, fail = threading.Event(), threading.Event()

    def slow(stopper: Stopper) -> str:
        release.wait(30)
        return "checked"

    def broken(stopper: Stopper) -> str:
        fail.wait(30)
        raise RuntimeError("git broke")

    try:
        assert pool.start("a", "gate", slow) and pool.start("b", "integration", broken)
        assert not pool.start("c", "gate", slow)  # both slots taken: nothing started
        fail.set()
        (failed,) = _wait_ended(pool, 1)
        assert failed == Ended("b", "integration", None, error="RuntimeError: git broke")
        assert pool.running() == {"a": "gate"} and pool.free() == 1
        assert not pool.start("a", "gate", slow)  # already running
        release.set()
        assert _wait_ended(pool, 1) == [Ended("a", "gate", "checked")]
        assert pool.running() == {} and pool.take() == []
    finally:
        release.set()
        fail.set()
        pool.close()
    assert not pool.start("d", "gate", slow)  # closed


@pytest.mark.skipif(sandbox_available() is not None, reason=str(sandbox_available()))
def test_close_kills_a_running_check_and_nothing_ends_after(tmp_path: Path) -> None:
    """A check that would hang for a day: closing the pool kills its sandbox (every process in it) at once; the
    work ends with no result (not a failed check), and the loop is told nothing."""
    tree = tmp_path / "tree"
    tree.mkdir()
    hang = ["sleep", "86395"]
    pool: CheckPool[list[CheckResult]] = CheckPool(1)

    def work(stopper: Stopper) -> list[CheckResult]:
        return run_checks([" ".join(hang)], tree, limits=CheckLimits(timeout=3600), stopper=stopper)

    assert pool.start("hang", "gate", work)
    wait_until(lambda: bool(own_processes(hang)), 30, "the check's sleep to start in its sandbox")
    pool.close()
    assert pool.running() == {}
    wait_until(lambda: not own_processes(hang), 10, "the check's processes to be gone")
    assert pool.take() == []


def test_checks_run_one_at_a_time_where_they_share_the_checks_uid(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a container every check is the one checks' uid, and each check's end kills that uid's processes: a
    second check beside it would be killed mid-run and read as failing."""
    monkeypatch.setattr(gate, "_sandbox", lambda host: (ChecksSandbox.OWN_UID, None))
    assert gate.slots(4) == 1
    monkeypatch.setattr(gate, "_sandbox", lambda host: (ChecksSandbox.BWRAP, None))
    assert gate.slots(4) == 4 and gate.slots(0) == 1
    monkeypatch.setattr(gate, "_sandbox", lambda host: (ChecksSandbox.RUN_UID, None))  # a token per check, no kill -1
    assert gate.slots(4) == 4


def test_a_pool_that_never_ran_a_check_kills_nothing_when_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every run closes its pool: one with no checks (most runs) has no checks' uid to kill, nor a sandbox to
    probe for it."""
    killed: list[gate.Host] = []
    monkeypatch.setattr(checkpool, "stop_uid_checks", killed.append)
    CheckPool[int](2, gate.Host("sock")).close()
    assert killed == []
    pool = CheckPool[int](2, gate.Host("sock"))
    assert pool.start("a", "gate", lambda stopper: 1)
    wait_until(lambda: pool.take(), 10, "the check to end")
    pool.close()
    assert killed == [gate.Host("sock")]

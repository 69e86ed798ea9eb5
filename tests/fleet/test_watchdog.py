"""The watchdog (orch/fleet/watchdog.py) on real processes of this machine: a worker past its memory or disk cap
is stopped and what it wrote past the cap removed."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orch.backends.registry import confinement_of
from orch.fleet.caps import Breach
from orch.fleet.watchdog import Watchdog
from orch.run.folder import RunFolder
from orch.run.records import WorkerCaps
from orch.settings.internal import STATE_FILE
from orch.waits import wait_until
from tests.helpers import run_info

MIB = 1 << 20


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunFolder]:
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    folder = RunFolder.for_name("capped")
    caps = WorkerCaps(pids=40, memory=64 * MIB, disk=4 * MIB, run_folder=64 * MIB)
    info = run_info("capped", workers=2, workdir=str(tmp_path)).model_copy(update={"caps": caps})
    folder.create(info)
    yield folder


def as_worker(run: RunFolder, n: int, code: str) -> subprocess.Popen[bytes]:
    """A process of worker n as shared isolation knows it: it inherits its supervisor's state file."""
    env = {**os.environ, STATE_FILE.name: str(run.state(n))}
    return subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True)


def test_the_watchdog_stops_a_memory_hog_and_a_disk_filler(run: RunFolder) -> None:
    info = run.info()
    hog = as_worker(run, 1, "import time; b = bytearray(128 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(60)")
    filler = as_worker(run, 2, "import time; time.sleep(60)")
    run.outbox(2).mkdir(parents=True, exist_ok=True)
    (run.outbox(2) / "fill.bin").write_bytes(os.urandom(8 * MIB))
    dog = Watchdog(run, info, [1, 2], confinement_of(info))
    try:
        found: list[Breach] = []

        def both_seen() -> bool:
            found.extend(dog.check())
            return {b.cap for b in found} >= {"memory", "disk"}

        wait_until(both_seen, 30, "the watchdog to see the hog and the filler")
        assert {(b.worker, b.cap) for b in found} == {(1, "memory"), (2, "disk")}
        assert hog.wait(timeout=10) == -9
        assert not (run.outbox(2) / "fill.bin").exists()  # what it wrote is gone
        taken = dog.take()
        killed = {b.worker: pids for b, pids in taken}
        assert set(killed) == {1, 2} and hog.pid in killed[1] and filler.pid in killed[2]
    finally:
        for proc in (hog, filler):
            proc.kill()
            proc.wait()


def test_a_worker_is_marked_stopping_from_before_its_kill_until_the_breach_is_taken(run: RunFolder) -> None:
    """The controller may see the killed agent's crash before it takes the breach: it must not restart the
    agent back onto the job that broke the cap meanwhile (seen in a container run: the disk filler's brief ran
    again after its job had failed), and it takes the breach only once the kill is over (its own helpers, run
    as the worker, would meet the kill of every process of that uid)."""
    filler = as_worker(run, 2, "import time; time.sleep(60)")
    run.outbox(2).mkdir(parents=True, exist_ok=True)
    (run.outbox(2) / "fill.bin").write_bytes(os.urandom(8 * MIB))
    at_kill: list[tuple[bool, list[int]]] = []

    class Recording(Watchdog):
        def stop_worker(self, breach: Breach, pids: set[int]) -> None:
            at_kill.append((self.stopping(breach.worker), [b.worker for b, _ in self.take()]))
            super().stop_worker(breach, pids)

    dog = Recording(run, run.info(), [1, 2], confinement_of(run.info()))
    try:
        wait_until(lambda: dog.check(), 30, "the watchdog to see the filler")
        assert at_kill == [(True, [])]  # stopping, and nothing to take yet
        assert filler.wait(timeout=10) == -9
        assert dog.stopping(2) and not dog.stopping(1)  # until the controller takes it
        assert [b.worker for b, _ in dog.take()] == [2] and not dog.stopping(2)
    finally:
        filler.kill()
        filler.wait()

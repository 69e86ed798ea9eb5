"""The watchdog (orch/fleet/watchdog.py) on real processes of this machine: a worker past its memory or disk cap
is stopped and what it wrote past the cap removed."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orch import settings
from orch.fleet import caps, diskuse
from orch.fleet.caps import Breach
from orch.fleet.watchdog import Watchdog
from orch.run.folder import RunFolder
from orch.run.records import WorkerCaps
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
    env = {**os.environ, settings.STATE_FILE.name: str(run.state(n))}
    return subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True)


def test_the_watchdog_stops_a_memory_hog_and_a_disk_filler(run: RunFolder) -> None:
    info = run.info()
    hog = as_worker(run, 1, "import time; b = bytearray(128 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(60)")
    filler = as_worker(run, 2, "import time; time.sleep(60)")
    run.outbox(2).mkdir(parents=True, exist_ok=True)
    (run.outbox(2) / "fill.bin").write_bytes(os.urandom(8 * MIB))
    dog = Watchdog(run, info, [1, 2])
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

    dog = Recording(run, run.info(), [1, 2])
    try:
        wait_until(lambda: dog.check(), 30, "the watchdog to see the filler")
        assert at_kill == [(True, [])]  # stopping, and nothing to take yet
        assert filler.wait(timeout=10) == -9
        assert dog.stopping(2) and not dog.stopping(1)  # until the controller takes it
        assert [b.worker for b, _ in dog.take()] == [2] and not dog.stopping(2)
    finally:
        filler.kill()
        filler.wait()


def test_a_worker_with_files_by_the_hundred_thousand_hides_no_one_s_bytes(
    run: RunFolder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk's limit is each worker's, never all of theirs: worker 1 past the file count (a few hundred here, for
    200,000) is over its disk cap by that alone, and worker 2's big file, wherever the walk meets it, is still
    measured (the walk once stopped at 200,000 files in all, before it reached other files)."""
    monkeypatch.setattr(diskuse, "MAX_FILES", 300)
    monkeypatch.setattr(caps, "MAX_FILES", 300)
    for folder in (run.outbox(1), run.sessions(1)):
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(400):
            (folder / f"f{i}").touch()
    run.sessions(2).mkdir(parents=True, exist_ok=True)
    (run.sessions(2) / "big.bin").write_bytes(os.urandom(8 * MIB))
    look = diskuse.measure_disk(run, run.info(), [1, 2])
    assert look.over == {1} and 300 < look.files[1] <= 302  # it stopped reading worker 1's at its count
    assert look.written[2] >= 8 * MIB
    found = Watchdog(run, run.info(), [1, 2]).check()
    assert {(b.worker, b.cap) for b in found} == {(1, "files"), (2, "disk")}
    assert not list(run.outbox(1).iterdir())  # what it wrote is gone


def test_memory_a_worker_holds_as_a_file_with_no_name_counts_as_written(run: RunFolder) -> None:
    """A memfd (memory no RSS shows while it is not mapped) and a deleted file kept open: its bytes."""
    hold = (
        "import os, time\nm = os.memfd_create('x')\nos.write(m, b'x' * (3 << 20))\n"
        f"f = open({str(run.outbox(2) / 'gone')!r}, 'wb')\nf.write(b'x' * (3 << 20))\nf.flush()\n"
        f"os.unlink({str(run.outbox(2) / 'gone')!r})\nprint('held', flush=True)\ntime.sleep(60)"
    )
    run.outbox(2).mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", hold],
        env={**os.environ, settings.STATE_FILE.name: str(run.state(2))},
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        dog = Watchdog(run, run.info(), [1, 2])
        found = dog.check()
        assert [(b.worker, b.cap) for b in found] == [(2, "disk")] and found[0].used >= 6 * MIB, found
    finally:
        holder.kill()
        holder.wait()

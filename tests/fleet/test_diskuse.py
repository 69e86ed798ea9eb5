"""What each worker wrote (orch/fleet/diskuse.py), on real files and processes of this machine: the walk's limit is
each worker's, and memory a worker holds as files with no name counts (a local sandbox's own tmpfs:
tests/backends/local/test_bwrap.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orch.backends.registry import confinement_of
from orch.fleet import caps, diskuse
from orch.fleet.watchdog import Watchdog
from orch.run.folder import RunFolder
from orch.run.records import WorkerCaps
from orch.settings.internal import STATE_FILE
from tests.helpers import run_info

MIB = 1 << 20


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunFolder]:
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    folder = RunFolder.for_name("walked")
    limits = WorkerCaps(pids=40, memory=64 * MIB, disk=4 * MIB, run_folder=64 * MIB)
    folder.create(run_info("walked", workers=2, workdir=str(tmp_path)).model_copy(update={"caps": limits}))
    yield folder


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
    look = diskuse.measure_disk(run, [1, 2], confinement_of(run.info()))
    assert look.over == {1} and 300 < look.files[1] <= 302  # it stopped reading worker 1's at its count
    assert look.written[2] >= 8 * MIB
    found = Watchdog(run, run.info(), [1, 2], confinement_of(run.info())).check()
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
        env={**os.environ, STATE_FILE.name: str(run.state(2))},
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        dog = Watchdog(run, run.info(), [1, 2], confinement_of(run.info()))
        found = dog.check()
        assert [(b.worker, b.cap) for b in found] == [(2, "disk")] and found[0].used >= 6 * MIB, found
    finally:
        holder.kill()
        holder.wait()

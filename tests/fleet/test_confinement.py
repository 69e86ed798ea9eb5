"""Shared isolation's confinement (orch/fleet/confinement.py), on real processes of this machine: a process is the
worker's whose state file it inherited, a pane is the agent under its caps and the supervisor, its strays are
signalled and a stopped worker's outbox emptied by this process, and nothing runs beside the fleet."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orch import procs
from orch.agents.registry import get_adapter
from orch.contracts import WorkerContext
from orch.fleet.confinement import Shared, kill_pids
from orch.fleet.supervisor import SUPERVISOR
from orch.run.folder import RunFolder
from orch.settings.internal import STATE_FILE
from orch.waits import wait_until
from tests.helpers import run_info

SLEEP = "import time; time.sleep(60)"


@pytest.fixture
def run(tmp_path: Path) -> Iterator[RunFolder]:
    folder = RunFolder.for_name("sh")
    folder.create(run_info("sh", workers=2, workdir=str(tmp_path)))
    yield folder


def _worker(run: RunFolder, n: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, STATE_FILE.name: str(run.state(n))}
    return subprocess.Popen([sys.executable, "-c", SLEEP], env=env)


def test_a_process_is_the_worker_s_whose_state_file_it_inherited(run: RunFolder) -> None:
    one, two, other = _worker(run, 1), _worker(run, 2), subprocess.Popen([sys.executable, "-c", SLEEP])
    try:
        attribution = Shared().attribution(run, [1])
        for proc in (one, two, other):  # each past its exec: its environment laid out (orch.procs.settled)
            wait_until(functools.partial(procs.settled, proc.pid), 10, "the child's exec")
        owners = {p.pid: attribution.owner(p.pid) for p in (one, two, other)}
        assert owners == {one.pid: 1, two.pid: None, other.pid: None}  # worker 2 is not asked for
        kill_pids("TERM", [one.pid, 1 << 30])  # one gone (or never there) is no error
        assert one.wait(timeout=10) == -15
    finally:
        for proc in (one, two, other):
            proc.kill()
            proc.wait()


def test_a_stopped_worker_is_killed_and_its_outbox_emptied(run: RunFolder) -> None:
    proc = _worker(run, 1)
    (run.outbox(1) / "big.bin").write_bytes(b"x" * 4096)
    Shared().stop_worker(run.info(), 1, {proc.pid}, run.outbox(1))
    assert proc.wait(timeout=10) == -9 and not any(run.outbox(1).iterdir())


def test_a_shared_pane_is_the_agent_under_its_caps_and_the_supervisor(run: RunFolder) -> None:
    info = run.info()
    ctx = WorkerContext(run, 1, 2, Path(info.workdir), run.config_dir(1), "default", env={})
    spec = Shared().pane(run, info, get_adapter("scripted"), ctx, {"OWN": "x"})
    assert spec.argv[:3] == ["sh", "-c", SUPERVISOR] and "prlimit" in spec.argv and "choom" in spec.argv
    assert "nice" not in spec.argv  # niced only where each worker has its own uid
    assert spec.env["OWN"] == "x" and spec.env[STATE_FILE.name] == str(run.state(1))
    shared, boxed = Shared(), Shared(boxed=True)
    assert (shared.name, shared.own_uids, shared.boxed, boxed.boxed) == ("shared", False, False, True)
    assert not shared.needs_relay(info) and not shared.ensure_relay(run, info, "http://x") and not shared.scratch()
    assert shared.agent_tree(123) == (123, set()) and shared.pane_socket(run, get_adapter("aider"), 1) is None

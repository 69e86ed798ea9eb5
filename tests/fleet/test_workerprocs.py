"""orch.fleet.workerprocs: which processes are which worker's, on real processes of this machine: by the
state-file variable under shared isolation, by the bubblewrap sandbox's pid namespace under local strict
isolation, and each process read once (a later look reads only what started since)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orch import procs
from orch.backends.local.bwrap import ByNamespace
from orch.backends.registry import confinement_of
from orch.fleet.confinement import Owner
from orch.fleet.workerprocs import YOUNG_S, WorkerProcesses
from orch.run.folder import RunFolder
from orch.run.records import Isolation
from orch.settings.internal import STATE_FILE
from orch.waits import wait_until
from tests.helpers import run_info

SLEEP = "import time; time.sleep(60)"


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolation: Isolation) -> RunFolder:
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    folder = RunFolder.for_name("procs")
    info = run_info("procs", workers=2, workdir=str(tmp_path)).model_copy(update={"isolation": isolation})
    folder.create(info)
    for n in (1, 2):
        folder.outbox(n).mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def test_shared_isolation_reads_each_process_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, started: list[subprocess.Popen[bytes]]
) -> None:
    run = _run(tmp_path, monkeypatch, Isolation.SHARED)
    mark = {**os.environ, STATE_FILE.name: str(run.state(1))}
    started.append(subprocess.Popen([sys.executable, "-c", SLEEP], env=mark))
    watcher = WorkerProcesses(run, [1, 2], confinement_of(run.info()))
    assert watcher.look() == {1: {started[0].pid}, 2: set()}
    assert watcher.read > 0
    # A process that is no worker's yet, then execs as worker 2's (a pane's first process does so).
    env = f"{{**os.environ, {STATE_FILE.name!r}: {str(run.state(2))!r}}}"
    script = f"import os, sys; sys.stdin.read(1); os.execvpe(sys.executable, [sys.executable, '-c', {SLEEP!r}], {env})"
    late = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE)
    started.append(late)
    assert late.pid not in watcher.look()[2]
    assert late.stdin is not None
    late.stdin.write(b"x")
    late.stdin.close()
    wait_until(lambda: late.pid in watcher.look()[2], 10, "the exec'd process to be worker 2's")
    # A later look reads again only what is new or still young, never what it already knows to be old.
    known, attribution, read = set(watcher._owner), watcher.attribution, []

    class Counted:
        def owner(self, pid: int) -> Owner:
            read.append(pid)
            return attribution.owner(pid)

        def forget(self, alive: set[int], span: range | tuple[range, range] | None) -> None:
            attribution.forget(alive, span)

    monkeypatch.setattr(watcher, "attribution", Counted())
    assert watcher.look()[1] == {started[0].pid}
    now = time.time()
    old = [pid for pid in read if pid in known and (procs.started(pid) or now) + YOUNG_S < now - 1]
    assert not old and started[0].pid not in read, old


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_sandboxed_worker_is_its_pid_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, started: list[subprocess.Popen[bytes]]
) -> None:
    """Worker n's processes are those of the sandbox whose bwrap binds its outbox, wherever they went in it
    (a daemon that left its parent); a process outside any sandbox is none of them, whatever it claims."""
    run = _run(tmp_path, monkeypatch, Isolation.STRICT)
    for n in (1, 2):
        box = str(run.outbox(n))
        inner = "setsid sleep 60 & exec sleep 61"
        argv = ["bwrap", "--unshare-pid", "--dev-bind", "/", "/", "--bind", box, box, "--", "sh", "-c", inner]
        started.append(subprocess.Popen(argv))
    liar = {**os.environ, STATE_FILE.name: str(run.state(1))}
    started.append(subprocess.Popen([sys.executable, "-c", SLEEP], env=liar))
    watcher = WorkerProcesses(run, [1, 2], confinement_of(run.info()))
    assert isinstance(watcher.attribution, ByNamespace)
    # bwrap's init (pid 1 inside), the shell exec'd as sleep, and the daemon: three in each sandbox.

    def both() -> dict[int, set[int]] | None:
        found = watcher.look()
        return found if all(len(found[n]) >= 3 for n in (1, 2)) else None

    found = wait_until(both, 10, "both sandboxes' processes")
    assert not found[1] & found[2]
    assert started[2].pid not in found[1] | found[2]
    for n, bwrap in ((1, started[0]), (2, started[1])):
        assert bwrap.pid not in found[n]  # the sandbox itself, outside it, is not the worker's

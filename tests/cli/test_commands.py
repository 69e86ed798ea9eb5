"""CLI edges: `orch status` columns, `orch kill --all` past a run it cannot stop, `serve-run --create`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path

import docker
import pytest

from orch.cli.runs import status_lines
from orch.container.serverun import READY_LINE
from orch.fleet import control
from orch.fleet.booting import BOOT_TIMEOUT
from orch.fleet.tmux import TmuxServer
from orch.gateway.modeldir import UsageSnapshot, WorkerUsage
from orch.gateway.process import START_TIMEOUT as GATEWAY_START
from orch.run.folder import RunFolder
from orch.run.records import ContainerInfo, RunStatus, WorkerState
from orch.run.statusview import RunStatusView, WorkerStatus
from orch.waits import wait_until
from tests.helpers import orch, run_info

NO_ENGINE = "unix:///nonexistent/docker.sock"


def _unreachable_run(name: str, tmp_path: Path) -> RunFolder:
    """A container run whose engine socket does not exist: every Docker call fails with an OrchError."""
    return _made_run(
        name, ContainerInfo(name=f"orch-{name}", image="orch-worker", docker_host=NO_ENGINE, host_run_dir="/x")
    )


def _made_run(name: str, container: ContainerInfo | None = None) -> RunFolder:
    """A run folder as `orch up` leaves it, without starting anything (a local run when no container)."""
    run = RunFolder.for_name(name)
    run.create(run_info(name, container=container))
    return run


def _columns(line: str, header: str) -> list[str]:
    """The cells of `line` cut where the header's titles start (COST is right-aligned: it ends RESULT's cell)."""
    starts = [header.index(title) for title in ("STATE", "DONE", "RESULT", "LAST BUS LINE")]
    return [" ".join(line[a:b].split()) for a, b in pairwise(starts)]


def test_status_columns_fit_their_longest_cell() -> None:
    detail = "container exited (137), then the engine said something rather long about it"
    view = RunStatusView(
        name="wide",
        backend="docker",
        agent="claude",
        status=RunStatus.RUNNING,
        alive=False,
        workers=[
            WorkerStatus(worker=1, state=WorkerState.CRASHED, detail=detail, done=False, result=False),
            WorkerStatus(worker=12, state=WorkerState.IDLE, done=True, result=True, cost_usd=0.5, last_bus="b" * 200),
        ],
    )
    title, head, header, first, second = status_lines(view)
    assert title == "run wide (docker, claude, running, not running)"
    assert head == "  no outcome yet; cost unknown"
    assert _columns(first, header) == [f"crashed ({detail})", "no", "no -"]
    assert _columns(second, header) == ["idle", "yes", "yes $0.5000"]
    assert first.startswith("   1 ") and second.startswith("  12 ")  # worker numbers right-aligned
    assert second.endswith("$0.5000  " + "b" * 79 + "…")  # only the last column is capped


def test_status_reads_cost_and_rate_limits_from_the_gateway() -> None:
    run = RunFolder.for_name("metered")
    run.create(run_info("metered", workers=2))
    run.model_dir.mkdir()
    until = time.time() + 600
    usage = UsageSnapshot(
        offline=True,
        billed=False,
        pricing="shipped",
        updated=1.0,
        workers={1: WorkerUsage(cost_usd=0.25, rate_limited_until=until), 2: WorkerUsage(rate_limited_until=1.0)},
    )
    run.model_usage.write_text(usage.model_dump_json())
    view = control.status_view(run, run.info(), panes=None, why_down="stopped")
    assert [(w.cost_usd, w.rate_limited_until) for w in view.workers] == [(0.25, until), (0.0, 1.0)]
    _, head, header, first, second = status_lines(view)
    assert head.endswith(", nothing billed (offline: orch's scripted model answered)")  # beside the run's cost
    assert "COST (NOT BILLED)" in header
    hhmmss = time.strftime("%H:%M:%S", time.localtime(until))
    assert _columns(first, header)[0] == f"exited (stopped) (rate-limited until {hhmmss})"
    assert "rate-limited" not in second  # a limit in the past is over
    assert "$0.2500" in first


def test_status_shows_the_whole_unreachable_engine_detail(tmp_path: Path) -> None:
    _unreachable_run("gone", tmp_path)
    result = orch("status", "gone")
    assert result.exit_code == 0, result.output
    assert f"exited (engine unreachable: Docker engine not reachable at {NO_ENGINE}: " in result.output
    assert ") no   no  " in result.output  # the detail's closing parenthesis, then the DONE column


def test_kill_all_goes_on_past_a_run_it_cannot_stop(tmp_path: Path) -> None:
    _unreachable_run("a-gone", tmp_path)  # sorted first: the old loop stopped here
    workdir = tmp_path / "work"
    workdir.mkdir()
    up = orch("up", "b-live", "--agent", "scripted", "--workdir", workdir, "--local")
    assert up.exit_code == 0, up.output
    live = RunFolder.for_name("b-live")
    assert TmuxServer(live.info().tmux_socket).alive()

    result = orch("kill", "--all")

    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert len(lines) == 2, result.output
    assert lines[0].startswith(f"could not stop a-gone: Docker engine not reachable at {NO_ENGINE}")
    assert lines[1] == f"killed b-live (folder kept: {live.root})"
    assert not TmuxServer(live.info().tmux_socket).alive()
    assert live.info().status is RunStatus.STOPPED

    single = orch("kill", "a-gone")  # one named run: still one error line and its own exit code
    assert single.exit_code == 2 and single.output.startswith("orch: error: Docker engine not reachable")
    assert single.output.count("\n") == 1


def _live_local_run(name: str, tmp_path: Path) -> RunFolder:
    workdir = tmp_path / "work"
    workdir.mkdir()
    up = orch("up", name, "--agent", "scripted", "--workdir", workdir, "--local")
    assert up.exit_code == 0, up.output
    return RunFolder.for_name(name)


def _kill_all_past(bad: str, live: RunFolder) -> str:
    """`orch kill --all` over a run it cannot stop, sorted before `live`: the one error line it printed."""
    result = orch("kill", "--all")
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert len(lines) == 2, result.output
    assert lines[0].startswith(f"could not stop {bad}: "), result.output
    assert lines[1] == f"killed {live.name} (folder kept: {live.root})"
    assert not TmuxServer(live.info().tmux_socket).alive()
    return lines[0]


def test_kill_all_goes_on_past_an_os_error(tmp_path: Path) -> None:
    broken = _made_run("a-unwritable")
    broken.events.unlink(missing_ok=True)
    broken.events.mkdir()  # the kill cannot log its event: an OSError, not an OrchError
    live = _live_local_run("b-live", tmp_path)
    line = _kill_all_past("a-unwritable", live)
    assert line.endswith(f"IsADirectoryError: [Errno 21] Is a directory: '{broken.events}'")
    single = orch("kill", "a-unwritable")  # named alone: the same error as one line (no traceback), exit 1
    assert single.exit_code == 1 and single.output.count("\n") == 1, single.output
    assert single.output.startswith("orch: error: IsADirectoryError: [Errno 21] Is a directory")


@pytest.mark.docker
def test_kill_all_goes_on_past_a_docker_sdk_error(engine: docker.DockerClient, tmp_path: Path) -> None:
    # A corrupt run.json naming no container: the SDK refuses before asking the engine (NullResource).
    _made_run("a-nameless", ContainerInfo(name="", image="orch-worker", host_run_dir="/x"))
    live = _live_local_run("b-live", tmp_path)
    line = _kill_all_past("a-nameless", live)
    assert line.endswith("NullResource: Resource ID was not provided")


def test_serve_run_create_makes_the_run_orch_up_makes(tmp_path: Path) -> None:
    """Both build their request from the same options: the runs they make must agree on every field asked."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    fleet = ["-n", "2", "--agent", "scripted", "--workdir", str(workdir), "--permission-mode", "default"]
    fleet += ["--model", "m9"]
    up = orch("up", "by-up", *fleet, "--local")
    assert up.exit_code == 0, up.output
    out = tmp_path / "serve-run.out"
    with out.open("wb") as fh:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from orch.cli.main import main; main()",
                "serve-run",
                "by-serve",
                "--create",
                *fleet,
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, "ORCH_IN_CONTAINER": "1"},  # serve-run refuses to run anywhere else
        )
    try:
        # Started (its run folder made), then launched or failed within its own bounds (its gateway's start, then
        # its workers' boot): on a loaded machine the launch outlasted the 60 s this waited, shorter than those.
        made = RunFolder.for_name("by-serve")
        wait_until(lambda: made.exists() or proc.poll() is not None, 60, "serve-run to start and make its run")
        launched = GATEWAY_START + BOOT_TIMEOUT
        wait_until(lambda: READY_LINE in out.read_text() or proc.poll() is not None, launched, "serve-run's launch")
        assert READY_LINE in out.read_text(), out.read_text()
        asked = {"agent", "workers", "workdir", "permission_mode", "model", "worker_models", "offline"}
        by_up, by_serve = (RunFolder.for_name(n).info().model_dump(include=asked) for n in ("by-up", "by-serve"))
        assert by_serve == by_up == {**by_up, "workers": 2, "model": "m9", "workdir": str(workdir.resolve())}
    finally:
        proc.terminate()  # SIGTERM: serve-run stops its tmux and marks the run stopped
        assert proc.wait(60) == 0, out.read_text()
        orch("kill", "by-up")
    assert RunFolder.for_name("by-serve").info().status is RunStatus.STOPPED


def test_ls_columns_fit_long_names(tmp_path: Path) -> None:
    long = "a-run-with-a-name-longer-than-the-old-fixed-column-of-24"
    for name in ("x", long):
        _unreachable_run(name, tmp_path)
    result = orch("ls")
    assert result.exit_code == 0, result.output
    header, *rows = result.output.splitlines()
    assert [row.split()[0] for row in rows] == [long, "x"]
    backend_at = header.index("BACKEND")
    assert all(row[backend_at:].startswith("docker") for row in rows), result.output


# Runs `orch` as its entry point does, then writes the modules it imported where ORCH_TEST_MODULES says.
PROBE = (
    "import os, sys\n"
    "try:\n"
    "    from orch.cli.main import main; main()\n"
    "finally:\n"
    "    open(os.environ['ORCH_TEST_MODULES'], 'w').write('\\n'.join(sys.modules))\n"
)


def _imported(tmp_path: Path, *args: str, stdin: str = "") -> set[str]:
    """The modules a real `orch ARGS` process imported (it must succeed)."""
    modules = tmp_path / f"{args[0]}.modules"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], input=stdin, capture_output=True, text=True, timeout=300,
        env={**os.environ, "ORCH_TEST_MODULES": str(modules)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return set(modules.read_text().splitlines())


def test_up_and_brief_import_only_what_their_path_needs(tmp_path: Path) -> None:
    """`orch up` with no notice asked never loads the notifier; `orch brief` (a lead's every step) never loads the
    launcher, the fleet's control, the gateway's process code or psutil: each was 10-30 ms of CPU a call."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    try:
        up = _imported(tmp_path, "up", "lean", "--agent", "scripted", "--workdir", str(workdir), "--local")
        assert "orch.fleet.launch" in up  # the probe sees the path's own modules
        assert not {"orch.notify.send", "orch.notify.follow"} & up
        brief = _imported(tmp_path, "brief", "lean", "1", "-", stdin="say hello\n")
        assert "orch.fleet.talk" in brief
        assert (
            not {"orch.fleet.launch", "orch.fleet.control", "orch.gateway.process", "orch.notify.send", "psutil"}
            & brief
        )
    finally:
        orch("kill", "lean")

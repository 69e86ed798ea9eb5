"""Per-worker caps (orch.fleet.caps): the pane's limits and the decisions (the watchdog that acts on them:
test_watchdog.py; the stopping of leftovers: test_stopping.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from orch import procs
from orch.cli.fleet import worker_caps
from orch.errors import UsageError
from orch.fleet import caps
from orch.fleet.caps import Breach, Usage, breaches, container_pids, limit_argv
from orch.run.records import WorkerCaps
from orch.settings.limits import CAPS_RESERVE, WORKER_PIDS

MIB = 1 << 20


def test_caps_read_sizes_as_docker_does_and_off_means_none() -> None:
    read = WorkerCaps.model_validate({"memory": "512m", "disk": "2g", "run_folder": "off", "pids": "off"})
    assert read == WorkerCaps(memory=512 * MIB, disk=2 << 30, run_folder=None, pids=None)
    assert WorkerCaps().pids == WORKER_PIDS and WorkerCaps().disk == 1 << 30
    assert worker_caps("64", "1g", None, "off") == WorkerCaps(pids=64, memory=1 << 30, run_folder=None)


@pytest.mark.parametrize(
    ("pids", "memory", "disk", "folder", "flag"),
    [
        ("3", None, None, None, "--pids-per-worker"),
        (None, "lots", None, None, "--memory-per-worker"),
        (None, None, "10", None, "--disk-per-worker"),
        (None, None, None, "-1g", "--run-folder-max"),
    ],
)
def test_bad_cap_options_are_one_line(
    pids: str | None, memory: str | None, disk: str | None, folder: str | None, flag: str
) -> None:
    with pytest.raises(UsageError) as exc:
        worker_caps(pids, memory, disk, folder)
    assert exc.value.one_line().startswith(flag) and "\n" not in exc.value.one_line()


def test_the_pane_starts_under_hard_limits_it_cannot_raise() -> None:
    strict = limit_argv(WorkerCaps(pids=100, disk=64 * MIB), True, 3)
    tail = ["--", "choom", "-n", "1000", "--", "nice", "-n", "10"]
    assert strict == ["prlimit", "--core=0", "--nproc=100", f"--fsize={64 * MIB}", *tail]
    # Sharing the user's uid, RLIMIT_NPROC bounds the uid's growth: what it runs now plus every worker's cap.
    shared = limit_argv(WorkerCaps(pids=100), False, 3)
    nproc = int(next(a for a in shared if a.startswith("--nproc=")).split("=")[1])
    assert nproc >= caps.USER_GROWTH + 300 + CAPS_RESERVE
    assert caps.local_nproc(5000, WorkerCaps(pids=100), 3) == 5000 * 2 + 300 + CAPS_RESERVE
    assert limit_argv(WorkerCaps.off(), True, 1) == ["prlimit", "--core=0", *tail]
    assert shared[-5:] == ["--", "choom", "-n", "1000", "--"]  # niced only in the container


def test_the_limits_hold_in_a_real_process() -> None:
    argv = limit_argv(WorkerCaps(pids=64, disk=MIB), True, 1)
    script = (
        "import os, resource; "
        "print(resource.getrlimit(resource.RLIMIT_FSIZE), open('/proc/self/oom_score_adj').read(), os.nice(0))"
    )
    out = subprocess.run([*argv, sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.split() == [f"({MIB},", f"{MIB})", "1000", str(os.nice(0) + 10)]
    # Sharing the user's uid (no nice): the agent's own options still reach the agent, not choom.
    shared = limit_argv(WorkerCaps(disk=MIB), False, 1)
    ran = subprocess.run([*shared, sys.executable, "-c", "print(1)"], capture_output=True, text=True, check=True)
    assert ran.stdout == "1\n"


def test_the_container_keeps_a_reserve_beyond_every_workers_cap() -> None:
    assert container_pids(WorkerCaps(pids=512), 8, 4096) == 512 * 8 + CAPS_RESERVE
    assert container_pids(WorkerCaps(pids=64), 2, 4096) == 4096
    assert container_pids(WorkerCaps.off(), 8, 4096) == 4096


@pytest.mark.parametrize(
    ("usage", "folder", "expected"),
    [
        ({1: Usage(tasks=10, memory=100, disk=10)}, 50, []),
        ({1: Usage(tasks=64)}, None, [Breach(1, "pids", 64, 64)]),  # at the cap: the kernel refuses more
        ({1: Usage(tasks=40, spawned=32)}, None, [Breach(1, "forks", 32, 32)]),  # churning below it
        ({1: Usage(tasks=40, spawned=31)}, None, []),
        ({1: Usage(memory=201)}, None, [Breach(1, "memory", 201, 200)]),
        ({1: Usage(disk=301), 2: Usage(disk=1)}, None, [Breach(1, "disk", 301, 300)]),
        # past the run folder's cap, its biggest writer stops
        ({1: Usage(disk=100), 2: Usage(disk=250)}, 1001, [Breach(2, "run-folder", 1001, 1000)]),
        ({1: Usage(disk=0)}, 1001, []),  # nobody to blame: the run's own files
    ],
)
def test_breaches(usage: dict[int, Usage], folder: int | None, expected: list[Breach]) -> None:
    limits = WorkerCaps.model_construct(pids=64, memory=200, disk=300, run_folder=1000)  # bytes, to read the table
    assert breaches(limits, usage, folder) == expected


def test_breach_reasons_say_which_cap() -> None:
    assert "processes and threads 70 (cap 64)" in Breach(1, "pids", 70, 64).reason()
    assert "the run folder's size" in Breach(1, "run-folder", 5, 4).reason()


def test_a_launch_counts_the_users_tasks_once_for_all_its_panes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A count of the uid's tasks reads every process of the machine: a launch's panes share one (the real
    count, watched), and outside a launch each prefix counts afresh."""
    counts: list[int] = []
    real = procs.uid_tasks

    def counted(uid: int) -> int:
        counts.append(real(uid))
        return counts[-1]

    monkeypatch.setattr(procs, "uid_tasks", counted)
    shared = WorkerCaps(pids=512)
    with caps.counted_once():
        prefixes = [limit_argv(shared, False, 64) for _ in range(64)]
    assert len(counts) == 1 and all(p == prefixes[0] for p in prefixes)
    limit_argv(shared, False, 64)
    limit_argv(shared, True, 64)  # a uid of its own: no count
    assert len(counts) == 2

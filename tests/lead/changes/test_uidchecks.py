"""The checks in a run's container: the checks' uid probed for real (a strict run that cannot start it is refused,
never run as the run's uid), and a shared run's checks as the run's own uid, leaving nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from orch import procs
from orch.lead.changes import uidchecks
from orch.lead.changes.checkwatch import CheckLimits
from orch.lead.changes.stopper import Stopper

MIB = 1 << 20
ROOT = Path(__file__).resolve().parents[3]


def _sleepers(mark: str) -> list[int]:
    return [pid for pid in procs.pids() if procs.alive(pid) and mark in procs.command(pid)]


def test_a_shared_runs_check_runs_as_the_run_on_its_own_copy_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the run's uid (this process's), with a clean environment; a process it detached (a session of its own)
    and one that dropped its token are both gone when its result comes back, as is its copy of the tree."""
    monkeypatch.setenv("ORCH_TEST_CANARY", "canary-uidchecks")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("hello\n")
    mark = f"{os.getpid()}{tmp_path.name[-6:]}"
    check = (
        f"setsid sh -c 'exec -a sleeper-{mark} sleep 600' </dev/null >/dev/null 2>&1 &"
        f" env -u {uidchecks.MARK} sh -c 'exec -a dropper-{mark} sleep 600' </dev/null >/dev/null 2>&1 &"
        " id -u; env; cat a.txt; touch b.txt; pwd"
    )
    result = uidchecks.run_as_run(check, tree, "", CheckLimits(timeout=60), Stopper())
    assert result.passed, result.output_tail
    assert result.output_tail.split()[0] == str(os.getuid())
    assert "canary-uidchecks" not in result.output_tail and f"{uidchecks.MARK}=" in result.output_tail
    assert "hello" in result.output_tail and not (tree / "b.txt").exists()  # its own copy
    assert _sleepers(mark) == []  # gone before its result came back, not after
    scratch = result.output_tail.split()[-1]
    assert not Path(scratch).exists()


def test_a_shared_runs_check_is_held_to_its_limits(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    hog = "python3 -c 'import time; b = b\"x\" * (200 << 20); time.sleep(60)'"
    hogged = uidchecks.run_as_run(hog, tree, "", CheckLimits(timeout=60, memory=64 * MIB), Stopper())
    assert (hogged.stopped or "").startswith("over the checks' memory cap"), hogged
    slow = uidchecks.run_as_run("sleep 60", tree, "", CheckLimits(timeout=1), Stopper())
    assert slow.timed_out and slow.exit_code is None, slow
    big = uidchecks.run_as_run("head -c 4M /dev/zero > big", tree, "", CheckLimits(disk=1 * MIB), Stopper())
    assert not big.passed, big  # the disk cap per file: RLIMIT_FSIZE


PROBE = """
import json, subprocess, sys
from pathlib import Path
from orch.errors import UsageError
from orch.lead.changes import gate, uidchecks
from orch.run.uids import checks_uid

socket, tree = sys.argv[1], Path(sys.argv[2])
# What the container's init wrote: its firewall cuts the checks' uid off the network.
uidchecks.read_report = lambda: {"checks_uid": checks_uid()}
subprocess.run(["tmux", "-L", socket, "-f", "/dev/null", "new-session", "-d", "sleep 600"], check=True)
out = {"probe": uidchecks.probe(socket)}
try:
    try:
        gate.sandbox_kind(gate.Host(socket, shared=False))
    except UsageError as exc:
        out["strict"] = exc.one_line()
    out["shared"] = gate.sandbox_kind(gate.Host(socket, shared=True)).value
    (result,) = gate.run_checks(["id -u"], tree, host=gate.Host(socket, shared=True))
    out["ran_as"] = result.output_tail.strip()
finally:
    subprocess.run(["tmux", "-L", socket, "kill-server"], check=False)
print(json.dumps(out))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="starting the probe as an unprivileged uid needs root")
def test_where_nothing_may_switch_uid_a_strict_run_is_refused_and_a_shared_one_runs_as_itself() -> None:
    """A run's container, as its controller sees it: an unprivileged uid with no capability, its tmux server the
    same (shared isolation's), no bubblewrap. The probe starts `true` as the checks' uid through that server and
    fails, so a strict run is refused in one line (never run as the run's uid instead); a shared run's checks run
    as its own uid."""
    run_uid = 3_200_000 + os.getpid() % 10_000
    with tempfile.TemporaryDirectory(prefix="orch-uidprobe-", dir="/tmp") as tmp:
        os.chmod(tmp, 0o777)
        tree = Path(tmp) / "tree"
        tree.mkdir(mode=0o777)
        env = {
            "PATH": os.environ["PATH"],
            "HOME": tmp,
            "TMUX_TMPDIR": tmp,
            "ORCH_HOME": f"{tmp}/orch",
            "ORCH_IN_CONTAINER": "1",
            "ORCH_BWRAP": f"{tmp}/no-bwrap",  # bubblewrap cannot make its namespaces in a container
            "ORCH_WORKER_UID_BASE": str(3_300_000 + (os.getpid() % 10_000) * 100),
            "PYTHONPATH": str(ROOT),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        drop = ["setpriv", f"--reuid={run_uid}", f"--regid={run_uid}", "--clear-groups", "--inh-caps=-all"]
        argv = [*drop, "--bounding-set=-all", "--", sys.executable, "-c", PROBE, "probe", str(tree)]
        done = subprocess.run(argv, env=env, cwd=tmp, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert "nor can the run's tmux server" in out["probe"] and "setpriv" in out["probe"], out
    assert "cannot start a process as uid" in out["strict"] and "\n" not in out["strict"], out
    assert out["shared"] == "run-uid" and out["ran_as"] == str(run_uid), out

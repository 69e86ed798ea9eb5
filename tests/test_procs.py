"""orch.procs: this machine's processes through psutil, and a process that ends while it is read is gone,
never an error (`orch run` once crashed when a worker's process ended while its ancestry was read)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from inotify_simple import INotify, flags

from orch import procs
from orch.waits import wait_until


def test_a_process_that_has_ended_reads_as_gone() -> None:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    pid = int(done.stdout)
    assert procs.ancestry(pid) is None and procs.cmdline(pid) == [] and procs.command(pid) == ""
    assert procs.uid(pid) is None and procs.env_var(pid, "PATH") is None and procs.children(pid) == []
    assert procs.pid_namespace(pid) is None and procs.load([pid]) == procs.Load()
    assert procs.tree(pid) == [] and procs.cpu_times(pid) is None and procs.rss(pid) == procs.pss(pid) == 0
    assert procs.voluntary_switches(pid) == 0 and procs.inotify_watches(pid) == set()


def test_a_live_process_reads_as_itself() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], env={**os.environ, "ORCH_PROCS_TEST": "yes"}
    )
    try:
        assert procs.ancestry(child.pid)[:2] == [child.pid, os.getpid()]  # type: ignore[index]
        wait_until(lambda: procs.settled(child.pid), 10, "the child's exec to set its environment")
        assert procs.env_var(child.pid, "ORCH_PROCS_TEST") == "yes"
        assert child.pid in procs.children(os.getpid()) and procs.uid(child.pid) == os.getuid()
        assert procs.cmdline(child.pid)[-1] == "import time; time.sleep(60)"
        assert procs.pid_namespace(child.pid) == procs.pid_namespace(os.getpid())
        assert child.pid in procs.of_uids({os.getuid()}) and procs.uid_tasks(os.getuid()) >= 2
        used = procs.load([child.pid, os.getpid()])
        assert used.tasks >= 2 and used.memory > 1 << 20
        each = procs.usage([child.pid])[child.pid]  # one /proc read: as psutil reads it
        assert each.tasks == psutil.Process(child.pid).num_threads()
        assert abs(each.memory - psutil.Process(child.pid).memory_info().rss) < 1 << 20
    finally:
        child.kill()
        child.wait()


def test_a_fresh_child_environment_is_its_own_or_not_yet_never_unset() -> None:
    """Popen returns inside the child's execve, before the kernel has laid out its environment: a read then
    must say "not yet", never "unset" (the caps watchdog would take the process for nobody's)."""
    seen = set()
    for _ in range(40):
        child = subprocess.Popen([sys.executable, "-S", "-c", "0"], env={"ORCH_PROCS_TEST": "yes"})
        try:
            seen.add(procs.env_var(child.pid, "ORCH_PROCS_TEST"))
        finally:
            child.wait()
    assert seen <= {"yes", procs.NOT_YET, None}  # None only once it has ended: the read came too late
    assert "yes" in seen or procs.NOT_YET in seen


KTHREADD = Path("/proc/2/comm")


@pytest.mark.skipif(not KTHREADD.is_file() or KTHREADD.read_text() != "kthreadd\n", reason="a pid namespace of its own")
def test_a_kernel_thread_is_settled() -> None:
    assert procs.settled(2) and procs.env_var(2, "PATH") is None  # kthreadd has no environment to wait for


def test_a_zombie_has_no_ancestry() -> None:
    child = subprocess.Popen(["true"])
    ended = os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # ended, not yet reaped
    assert ended is not None and procs.ancestry(child.pid) is None and not procs.alive(child.pid)
    assert procs.usage([child.pid]) == {} and procs.load([child.pid]) == procs.Load()  # it uses nothing now
    child.wait()


def test_reading_processes_that_end_meanwhile_never_raises() -> None:
    """Many short-lived processes, each read while it may be ending: every answer is a value."""
    churn = subprocess.Popen(
        ["sh", "-c", "for i in $(seq 300); do true & done; wait"], stdout=subprocess.DEVNULL, start_new_session=True
    )
    try:
        while churn.poll() is None:
            for pid in procs.children(churn.pid) + procs.pids()[-50:]:
                procs.ancestry(pid)
                procs.cmdline(pid)
                procs.env_var(pid, "PATH")
                procs.uid(pid)
                procs.load([pid])
    finally:
        churn.wait()


@pytest.mark.parametrize(
    ("before", "after", "top", "new", "old"),
    [
        (100, 110, 32768, [101, 110], [100, 111, 5]),
        (32760, 305, 32768, [32761, 32767, 300, 305], [32760, 306]),  # wrapped at pid_max
        (-1, 110, 32768, [1, 5000], []),  # unknown: every pid may be new
        (100, 100, 32768, [], [100, 101]),
    ],
)
def test_the_pids_handed_out_between_two_looks(
    before: int, after: int, top: int, new: list[int], old: list[int]
) -> None:
    span = procs.reused_between(before, after, top)
    assert all(procs.in_span(p, span) for p in new) and not any(procs.in_span(p, span) for p in old)


def test_a_trees_members_and_what_they_cost() -> None:
    """The bench's figures: a child and its grandchild in the tree, CPU that a child spent and was reaped,
    memory, wake-ups summed over every thread, and the inode an inotify watch holds."""
    script = (
        "import subprocess, sys, threading, time\n"
        "sum(range(3_000_000)); subprocess.run(['true'])  # CPU, then a reaped child's\n"
        "for _ in range(20): threading.Thread(target=time.sleep, args=(0.001,)).start()\n"
        "grandchild = subprocess.Popen(['sleep', '60']); print(grandchild.pid, flush=True); time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        assert procs.tree(child.pid) == [child.pid, grandchild] and procs.tree(grandchild) == [grandchild]
        times = procs.cpu_times(child.pid)
        assert times is not None and times.own > 0 and times.total == times.own + times.reaped_children
        assert procs.rss(child.pid) > 1 << 20 and procs.pss(child.pid) > 0
        assert procs.voluntary_switches(child.pid) >= 1
    finally:
        child.kill()
        child.wait()
    assert procs.cpu_model()


def test_an_inotify_watch_shows_as_the_watched_inode(tmp_path: Path) -> None:
    with INotify() as inotify:
        inotify.add_watch(tmp_path, flags.CREATE)
        assert tmp_path.stat().st_ino in procs.inotify_watches(os.getpid())
    assert tmp_path.stat().st_ino not in procs.inotify_watches(os.getpid())


def test_a_mount_this_process_shares_is_no_sandbox_s_own() -> None:
    """A sandbox whose tmpfs are not mounted yet sees the host's /tmp: none of its bytes are the sandbox's (a worker
    caught starting was once charged the host disk's 90 GB)."""
    assert procs.mounts_used(os.getpid(), ["/tmp", "/dev/shm"]) == (0, set())

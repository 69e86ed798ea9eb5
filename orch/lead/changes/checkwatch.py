"""Running one check and holding it to its limits: time, output, memory and disk, like a worker's caps.

The checks' sandbox (orch.lead.changes.gate) bounds what the kernel can: processes (RLIMIT_NPROC), and in
bubblewrap the disk (each writable place a tmpfs of the disk cap's size: /tmp, where the check's copy of the
tree lives, /var/tmp and /dev/shm). What no kernel limit holds here is watched while the check runs, every
WATCH_INTERVAL, as the caps watchdog watches a worker (orch.fleet.watchdog):
- memory: the resident memory of the check's processes together (bubblewrap: the sandbox's process tree; in a
  container, every process of the checks' uid, which runs one check at a time);
- disk: in bubblewrap, what its tmpfs hold; in a container (no sandbox of its own: the checks' uid copies the
  tree into the container's /tmp, shared with the controller), the files that uid owns in /tmp and /dev/shm;
  both with the unnamed files its processes hold open (a memfd, a deleted file).
A check past a cap is killed whole and fails (`CheckResult.stopped` says why; its output's tail ends with it).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import stat
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orch import procs
from orch.errors import WaitTimeoutError
from orch.jobs.changes import CheckResult
from orch.lead.changes.stopper import Stopper
from orch.lead.changes.switch import via_tmux
from orch.run.records import WorkerCaps
from orch.spec.model import FleetSpec
from orch.waits import wait_until

CHECK_TIMEOUT = 600.0
OUTPUT_BYTES = 64 << 10
WATCH_INTERVAL = 0.5
"""Seconds between two looks at a running check's memory and disk."""
SANDBOX_TMPFS = ("/tmp", "/var/tmp", "/dev/shm")
"""The writable places of a check's bubblewrap sandbox, each a tmpfs of the disk cap's size."""
UID_AREAS = (Path("/tmp"), Path("/dev/shm"))
"""Where the checks' uid can write in a run's container (the root file system is read-only)."""


@dataclass(frozen=True)
class CheckLimits:
    """What one check may use (None: no cap). The spec's `changes` give time and output, its `limits` (the
    workers' caps) memory and disk."""

    timeout: float = CHECK_TIMEOUT
    output_bytes: int = OUTPUT_BYTES
    memory: int | None = WorkerCaps().memory
    disk: int | None = WorkerCaps().disk

    @classmethod
    def of(cls, spec: FleetSpec) -> CheckLimits:
        caps = spec.limits.caps()
        return cls(spec.changes.check_timeout, spec.changes.check_output_bytes, caps.memory, caps.disk)

    def over(self, memory: int, disk: int) -> str | None:
        """Which cap a check using `memory` and `disk` bytes is past, in one line; None: within them."""
        if self.memory is not None and memory > self.memory:
            return f"over the checks' memory cap: resident memory {memory} bytes (cap {self.memory} bytes)"
        if self.disk is not None and disk > self.disk:
            return f"over the checks' disk cap: {disk} bytes written (cap {self.disk} bytes)"
        return None


DEFAULT_LIMITS = CheckLimits()
"""The workers' default caps, the spec's default time and output limits."""
Meter = Callable[[], tuple[int, int]]
"""A running check's memory and disk now, in bytes."""


def sandbox_meter(pid: int) -> Meter:
    """A bubblewrap sandbox started as process `pid`: its processes' memory; its tmpfs (read inside it, through a
    process of its own mount namespace) and the unnamed files its processes hold elsewhere."""
    outside = procs.mount_namespace(os.getpid())

    def meter() -> tuple[int, int]:
        pids = procs.tree(pid)
        inside = next((p for p in pids if procs.mount_namespace(p) not in (None, outside)), None)
        used, devices = procs.mounts_used(inside, SANDBOX_TMPFS) if inside is not None else (0, set())
        return procs.load(pids).memory, used + procs.held_files(pids, devices)

    return meter


def uid_meter(uid: int) -> Meter:
    """The checks' uid in a run's container: all its processes, its files where it can write, what it holds."""

    def meter() -> tuple[int, int]:
        pids = list(procs.of_uids({uid}))
        return procs.load(pids).memory, sum(owned(area, uid) for area in UID_AREAS) + procs.held_files(pids)

    return meter


def owned(root: Path, uid: int) -> int:
    """Bytes of the files `uid` (with no groups but its own gid, the same number) owns under `root`, walking only
    the folders it may enter: what it could not reach holds nothing of its (the other uids' private folders, the
    controller's, are passed by, not walked). Links are never followed, each file counted once."""
    total, stack, seen = 0, [root], set()
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_uid == uid and (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
            search = 0o100 if st.st_uid == uid else 0o010 if st.st_gid == uid else 0o001
            if stat.S_ISDIR(st.st_mode) and st.st_mode & search:
                stack.append(Path(entry.path))
    return total


def _stopped(result: CheckResult, why: str) -> CheckResult:
    """A check killed past a cap: no exit code, and why, in its record and at the end of its output's tail."""
    tail = result.output_tail + f"\n[orch] stopped: {why}\n"
    return result.model_copy(update={"exit_code": None, "stopped": why, "output_tail": tail})


Watch = Callable[[int], tuple[Meter, Callable[[], None]]]
"""A check not in bubblewrap, given its first process's pid: its meter, and what kills it whole (and clears its
files): its wrapper enforces the time limit itself, and a kill of the group misses its `timeout`'s."""


def run_one(
    command: str, argv: list[str], limits: CheckLimits, stopper: Stopper, watch: Watch | None = None
) -> CheckResult:
    """Run one sandboxed check, keeping its output's tail; past its time limit or a cap its process group is
    killed. `watch`: a check run as a uid in a container (orch.lead.changes.uidchecks); None: a bubblewrap
    sandbox, which dies whole with its first process, its tmpfs with it."""
    stopper.check()
    started = time.monotonic()
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    if watch is not None:
        meter, kill = watch(proc.pid)
        with stopper.track(proc):
            return _watch(proc, command, started, limits, stopper, meter, kill)
    sandbox: list[int] = []  # its pid namespace, once bubblewrap made it

    def look() -> tuple[int, int]:
        if not sandbox and (ns := pid_namespace_under(proc.pid)) is not None:
            sandbox.append(ns)
        return sandbox_meter(proc.pid)()

    try:
        with stopper.track(proc):
            return _watch(proc, command, started, limits, stopper, look, None)
    finally:  # a sandbox not seen yet (stopped before its first look) reads no result
        if sandbox:
            emptied(sandbox[0])


def pid_namespace_under(pid: int) -> int | None:
    """The pid namespace of a bubblewrap sandbox started as process `pid` (its init's, below it), once it is made."""
    outside = procs.pid_namespace(os.getpid())
    return next((ns for p in procs.tree(pid) if (ns := procs.pid_namespace(p)) not in (None, outside)), None)


def emptied(ns: int) -> None:
    """Wait until no process is left in pid namespace `ns`: a sandbox killed (its first process, or bwrap outside
    it) has the kernel kill the rest, which takes a moment; its check's result is read only after. Each process
    there is SIGKILLed again meanwhile (a stop's kill may have reached bwrap alone)."""

    def gone() -> bool:
        left = [p for p in procs.pids() if procs.pid_namespace(p) == ns and procs.alive(p)]
        for p in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGKILL)
        return not left

    with contextlib.suppress(WaitTimeoutError):  # one stuck in the kernel: nothing more to do for it here
        wait_until(gone, 10.0, "a check's sandbox to have no process left")


def _watch(
    proc: subprocess.Popen[bytes],
    command: str,
    started: float,
    limits: CheckLimits,
    stopper: Stopper,
    meter: Meter,
    kill: Callable[[], None] | None,
) -> CheckResult:
    assert proc.stdout is not None
    tail = bytearray()
    total = 0
    timed_out = False
    over: str | None = None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    grace = 30.0 if kill is not None else 0.0  # the uid's wrapper enforces the time limit itself
    next_look = started + WATCH_INTERVAL
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if now >= next_look:
                next_look = now + WATCH_INTERVAL
                if over := limits.over(*meter()):
                    break
            left = started + limits.timeout + grace - now
            if left <= 0:
                timed_out = True
                break
            if not sel.select(min(left, max(0.0, next_look - now))):
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            total += len(chunk)
            tail += chunk
            if len(tail) > limits.output_bytes:  # only the tail is kept: a flood costs no memory
                del tail[: len(tail) - limits.output_bytes]
    if timed_out or over:
        with contextlib.suppress(ProcessLookupError, PermissionError):  # the checks' uid's: `kill` reaches it
            os.killpg(proc.pid, signal.SIGKILL)
        if kill is not None:
            kill()
    code = proc.wait()
    proc.stdout.close()
    stopper.check()  # killed by a stop: no result, not a failing check
    elapsed = time.monotonic() - started
    if grace and code == 128 + signal.SIGKILL and elapsed >= limits.timeout:  # `timeout -s KILL` in the sandbox
        timed_out = True
    result = CheckResult(
        command=command,
        exit_code=None if timed_out else code,
        seconds=round(elapsed, 3),
        timed_out=timed_out,
        output_tail=tail.decode(errors="replace"),
        output_bytes=total,
    )
    return _stopped(result, over) if over else result


def run_via_tmux(
    socket: str,
    command: str,
    argv: list[str],
    limits: CheckLimits,
    stopper: Stopper,
    meter: Meter,
    kill: Callable[[], None],
) -> CheckResult:
    """One check started by the run's tmux server; the wrapper enforces the time limit itself (a stop ends it
    through `kill`: every process of the checks' uid), a cap is watched here."""
    stopper.check()
    over: list[str] = []

    def past_a_cap() -> bool:
        if not over and (why := limits.over(*meter())):
            over.append(why)
            kill()
        return bool(over)

    ran = via_tmux(socket, argv, limits.timeout + 30.0, limits.output_bytes, poll=past_a_cap)
    stopper.check()
    timed_out = ran.code is None or (ran.code == 128 + signal.SIGKILL and ran.seconds >= limits.timeout)
    result = CheckResult(
        command=command,
        exit_code=None if timed_out else ran.code,
        seconds=round(ran.seconds, 3),
        timed_out=timed_out and not over,
        output_tail=ran.output.decode(errors="replace"),
        output_bytes=len(ran.output),
    )
    return _stopped(result, over[0]) if over else result

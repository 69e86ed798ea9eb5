"""A uid of its own for each check a controller running as root starts in bubblewrap.

As root, bubblewrap makes no user namespace (none is needed), so the check runs as a real uid of the machine,
and RLIMIT_NPROC, the check's process cap, counts every process of that uid on the machine. With one uid for
all checks, one run's fork-bombing check filled the cap for every other run's checks. So each running check
leases a uid of its own from CHECK_UIDS, held by an flock on a file of a root-only folder for as long as the
check runs: the lease ends with the process holding it (a killed controller's included), and a uid is never
leased twice at once, across every run and ORCH_HOME on the machine. Nothing of a check outlives its lease: its
sandbox's pid namespace dies with its first process.

Rejected: a pids cgroup per check, which holds the count as well but needs a writable cgroup hierarchy that
differs by machine (v1 or v2, delegated by systemd or not); a uid works wherever root runs the checks.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from orch.errors import OrchError
from orch.run.folder import MAX_WORKERS
from orch.settings.user import WORKER_UID_BASE
from orch.waits import wait_until

LEASES = Path("/run/orch-check-uids")
"""The lease files (root's, 0700: no one else may take or hold one)."""
CHECK_UIDS = 256
"""How many checks may run at once on one machine as root (ORCH_WORKER_UID_BASE + MAX_WORKERS + 2, on)."""


def first_uid() -> int:
    """The pool's first uid: just above the workers' and the container checks' (orch.run.uids.checks_uid)."""
    return WORKER_UID_BASE.get() + MAX_WORKERS + 2


def _try(uid: int) -> int | None:
    fd = os.open(LEASES / str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


@contextlib.contextmanager
def lease(wait: float = 600.0) -> Iterator[int]:
    """A uid no other check on this machine runs as while the block lasts (as root only)."""
    LEASES.mkdir(mode=0o700, exist_ok=True)
    st = os.lstat(LEASES)
    if not os.path.isdir(LEASES) or os.path.islink(LEASES) or st.st_uid != 0 or st.st_mode & 0o077:
        raise OrchError(f"{LEASES} is not root's own folder: refusing to lease the checks' uids there")
    held: list[tuple[int, int]] = []

    def take() -> bool:
        for uid in range(first_uid(), first_uid() + CHECK_UIDS):
            if (fd := _try(uid)) is not None:
                held.append((uid, fd))
                return True
        return False

    wait_until(take, wait, f"one of the {CHECK_UIDS} checks' uids to be free")
    uid, fd = held[0]
    try:
        yield uid
    finally:
        os.close(fd)

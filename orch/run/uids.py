"""Who is who under strict isolation: worker N runs as uid and gid ORCH_WORKER_UID_BASE + N.

The controller runs as the run's uid (the user's own) and the model gateway as ORCH_GATEWAY_UID, so the
uid of a process, a file's owner or a socket's peer says which worker it is, and a worker cannot claim
to be another.

The kernel counts a uid's processes (RLIMIT_NPROC, a worker's process cap) across every container of a
machine, so each container run gets a range of its own (`range_base`), chosen at `orch up` and kept in its
record; its container's environment carries it as ORCH_WORKER_UID_BASE. An engine in a user namespace (rootless,
userns-remap) maps only uids below 65536: there the ranges are smaller, below it (`mapped`). The engine is the
arbiter between two `orch up`s at once (orch.backends.docker.boot.create_on_a_range).
"""

from __future__ import annotations

import ctypes
import hashlib
from collections.abc import Collection, Sequence
from pathlib import Path

from orch.errors import SandboxError
from orch.run.folder import MAX_WORKERS
from orch.settings.user import WORKER_UID_BASE

SWITCH_CAPS = ("setuid", "setgid", "setpcap")
"""What the run's tmux server keeps under strict isolation: just enough to start each pane as its worker
(SETPCAP: to empty the pane's bounding set too, so nothing a worker runs can ever hold a capability)."""


READ_ALL = "dac_read_search"
"""What a swarm task's syncer keeps (and nothing else of its own): reading the run folder's files that other
uids own, to push them home (orch.backends.swarm.syncer)."""

CAP_SETUID = 7  # linux/capability.h
PR_SET_NO_NEW_PRIVS = 38  # linux/prctl.h


def can_switch_uids() -> bool:
    """Whether this process may start processes as other uids (CAP_SETUID permitted): what strict isolation
    needs in a container, where the run's init gives it to the controller; a process in a container that
    was started without it (compose's `lead` service: `orch run` after the init dropped it) cannot."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return False
    permitted = next((line.split()[1] for line in status.splitlines() if line.startswith("CapPrm:")), "0")
    return bool(int(permitted, 16) >> CAP_SETUID & 1)


def worker_uid(n: int) -> int:
    """Worker n's uid (its gid is the same number)."""
    return WORKER_UID_BASE.get() + n


def checks_uid() -> int:
    """The uid the controller runs a change's checks as in a container (orch.lead.changes.gate): no worker's,
    and the container's firewall gives it no network at all (orch.container.egress.rules)."""
    return WORKER_UID_BASE.get() + MAX_WORKERS + 1


def worker_of(uid: int) -> int | None:
    """The worker a uid belongs to, or None: not a worker's."""
    n = uid - WORKER_UID_BASE.get()
    return n if 1 <= n <= MAX_WORKERS else None


RANGE_SIZE = 1024
"""The uids one run's range holds: its workers (BASE+1..BASE+MAX_WORKERS), its checks' (BASE+MAX_WORKERS+1)
and a local root run's check pool (orch.lead.changes.checkuids), with room to spare."""
RANGES_FIRST = 0x7000_0000
"""Where runs' ranges start: past the host's users (up to 60000), systemd's dynamic users (61184-65519),
useradd's subuid ranges (100000-600100000) and systemd's container ranges (524288-1879048191)."""
RANGES_END = 0x7FFE_0000
"""Where they end: before systemd's foreign range (0x7FFE0000-0x7FFEFFFF) and 2^31 (uids past it are read as
negative numbers by some tools)."""
RANGES = (RANGES_END - RANGES_FIRST) // RANGE_SIZE
MAPPED_SIZE = 128
"""A range's size where an engine maps only uids below 65536 (rootless, userns-remap): the workers and the checks'
uid (BASE+1..BASE+MAX_WORKERS+1); no local root run's check pool runs in a container."""
MAPPED_FIRST, MAPPED_END = 10_000, 60_928
"""Where those ranges are: past the image's system users and the usual first host users (1000 on), before the
gateway's default uid (61000), `nobody` (65534) and the end of the map (65536)."""


def range_base(name: str, taken: Collection[int], mapped: bool = False, reserved: Collection[int] = ()) -> int:
    """A container run's ORCH_WORKER_UID_BASE: the range its name hashes to, or the next one no range in `taken`
    (the bases of the engine's other runs) overlaps, so two runs on one machine never share a uid. `mapped`: an
    engine in a user namespace, which maps only uids below 65536: a smaller range there, never holding one of
    `reserved` (the run's and the gateway's uids)."""
    first, size, end = (MAPPED_FIRST, MAPPED_SIZE, MAPPED_END) if mapped else (RANGES_FIRST, RANGE_SIZE, RANGES_END)
    count = (end - first) // size
    start = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") % count
    # The ranges each base overlaps (its own, and the next when it is not on a boundary), and those holding a
    # reserved uid.
    blocked = {(other - first + at) // size for other in taken for at in (0, size - 1)}
    blocked |= {(uid - first) // size for uid in reserved}
    for step in range(count):
        index = (start + step) % count
        if index not in blocked:
            return first + index * size
    raise SandboxError(f"every worker uid range is taken ({count} runs on one engine)")


def drop_argv(uid: int, gid: int, keep: Sequence[str] = ()) -> list[str]:
    """`setpriv` to uid:gid with no supplementary groups and no-new-privs, every capability set emptied
    but for `keep` (names as setpriv spells them), which stay ambient: inherited by what it runs."""
    plus = "".join(f",+{cap}" for cap in keep)
    return [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={gid}",
        "--clear-groups",
        f"--inh-caps=-all{plus}",
        f"--ambient-caps=-all{plus}",
        f"--bounding-set=-all{plus}",
        "--no-new-privs",
        "--",
    ]


def no_new_privs() -> None:
    """PR_SET_NO_NEW_PRIVS for this process and all it starts: no setuid binary or file capability ever gives
    anything again. A container's init sets it first itself, where the engine cannot (Swarm services in
    Docker 20.10 have no `no-new-privileges`)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")

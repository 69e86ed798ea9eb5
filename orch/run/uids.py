"""Who is who under strict isolation: worker N runs as uid and gid ORCH_WORKER_UID_BASE + N.

The controller runs as the run's uid (the user's own) and the model gateway as ORCH_GATEWAY_UID, so the
uid of a process, a file's owner or a socket's peer says which worker it is, and a worker cannot claim
to be another.
"""

from __future__ import annotations

from orch import settings
from orch.run.folder import MAX_WORKERS


def worker_uid(n: int) -> int:
    """Worker n's uid (its gid is the same number)."""
    return settings.WORKER_UID_BASE.get() + n


def worker_of(uid: int) -> int | None:
    """The worker a uid belongs to, or None: not a worker's."""
    n = uid - settings.WORKER_UID_BASE.get()
    return n if 1 <= n <= MAX_WORKERS else None

"""Stopping a worker's processes, or a chosen few of them: SIGTERM, then SIGSTOP and SIGKILL round by round
past a deadline (a fork bomb respawns). Each signal goes the way the run's confinement sends it
(orch.fleet.confinement: a worker of its own uid's through a helper started as the worker)."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from orch.run.records import RunInfo

if TYPE_CHECKING:
    from orch.fleet.confinement import Confinement

STOP_GRACE = 2.0
"""Seconds stray processes get after SIGTERM before SIGKILL."""
STOP_DEADLINE = 10.0
"""Seconds to get every stray gone (a fork bomb respawns: each round freezes, then kills, what it finds)."""


@dataclass
class Stopped:
    killed: list[int] = field(default_factory=list)
    survived: list[int] = field(default_factory=list)


def stop(
    confinement: Confinement,
    info: RunInfo,
    n: int,
    find: Callable[[], set[int]],
    grace: float = STOP_GRACE,
    deadline: float = STOP_DEADLINE,
) -> Stopped:
    """Stop what `find` lists (worker n's strays): SIGTERM, up to `grace` seconds to go, then rounds of
    SIGSTOP and SIGKILL (a stopped process cannot fork) until none is left or `deadline` passed."""
    result = Stopped()
    first = find()
    if not first:
        return result
    seen = set(first)
    confinement.signal(info, n, "TERM,CONT", first)
    end_grace = time.monotonic() + grace
    left = first
    while left and time.monotonic() < end_grace:
        time.sleep(0.05)  # polling a kill with a deadline: no event says a process of another uid ended
        left = find()
        seen |= left
    end = time.monotonic() + deadline
    while left and time.monotonic() < end:
        confinement.signal(info, n, "STOP,KILL", left)
        time.sleep(0.05)
        left = find()
        seen |= left
    result.survived = sorted(left)
    result.killed = sorted(seen - left)
    return result


def remove_contents(folder: Path) -> None:
    """Empty a folder as this process (what a worker sharing its uid wrote there)."""
    for entry in folder.iterdir():
        with contextlib.suppress(OSError):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()

"""Stopping a worker's processes, or a chosen few of them: SIGTERM, then SIGSTOP and SIGKILL round by round
past a deadline (a fork bomb respawns). Under strict isolation in a container the controller may not
signal another uid: a helper the run's tmux server starts as the worker does it, as a pane starts."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from orch.fleet.caps import own_uids
from orch.fleet.tmux import TmuxServer
from orch.run.records import RunInfo
from orch.run.uids import drop_argv, worker_uid

STOP_GRACE = 2.0
"""Seconds stray processes get after SIGTERM before SIGKILL."""
STOP_DEADLINE = 10.0
"""Seconds to get every stray gone (a fork bomb respawns: each round freezes, then kills, what it finds)."""

# Run as the worker (strict isolation) by the run's tmux server: signal the pids given, or with none every
# process of the worker's uid but this one (kill(-1)); with `--clear DIR`, empty DIR (its outbox) too.
HELPER = (
    "import os,shutil,signal,sys\n"
    "a=sys.argv[1:]\n"
    "d=a.pop(a.index('--clear')+1) if '--clear' in a else None\n"
    "a=[x for x in a if x!='--clear']\n"
    "for s in a[0].split(','):\n"
    "    for p in a[1:] or ['-1']:\n"
    "        try: os.kill(int(p),signal.Signals['SIG'+s])\n"
    "        except OSError: pass\n"
    "for e in os.scandir(d) if d else []:\n"
    "    try: shutil.rmtree(e.path) if e.is_dir(follow_symlinks=False) else os.unlink(e.path)\n"
    "    except OSError: pass\n"
)


@dataclass
class Stopped:
    killed: list[int] = field(default_factory=list)
    survived: list[int] = field(default_factory=list)


def signal_worker(info: RunInfo, n: int, signals: str, pids: Iterable[int] | None, clear: Path | None = None) -> None:
    """Send `signals` (comma-separated names: STOP,KILL) to worker n's `pids`, or (None) to every process
    of the worker; with `clear`, empty that folder as the worker afterwards (strict isolation only)."""
    chosen = sorted(pids) if pids is not None else None
    if not own_uids(info):
        targets = chosen if chosen is not None else []
        for name in signals.split(","):
            for pid in targets:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.Signals["SIG" + name])
        return
    uid = worker_uid(n)
    argv = [*drop_argv(uid, uid), sys.executable, "-c", HELPER, signals, *(str(p) for p in chosen or [])]
    if clear is not None:
        argv += ["--clear", str(clear)]
    # The run's tmux server keeps SETUID/SETGID for the panes; the controller may have no capability at all.
    TmuxServer(info.tmux_socket).run_shell(shlex.join(argv) + " >/dev/null 2>&1")


def stop(
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
    signal_worker(info, n, "TERM,CONT", first)
    end_grace = time.monotonic() + grace
    left = first
    while left and time.monotonic() < end_grace:
        time.sleep(0.05)  # polling a kill with a deadline: no event says a process of another uid ended
        left = find()
        seen |= left
    end = time.monotonic() + deadline
    while left and time.monotonic() < end:
        signal_worker(info, n, "STOP,KILL", left)
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

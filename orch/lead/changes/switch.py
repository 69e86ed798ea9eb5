"""Starting a process as another uid from the controller. In a strict run's container the controller, reached
by `docker exec`, holds no capability; the run's tmux server keeps SETUID and SETGID (orch.run.uids.SWITCH_CAPS)
and starts the process instead (`run-shell -b`), its output and exit code coming back through files."""

from __future__ import annotations

import functools
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orch.errors import WaitTimeoutError
from orch.run.uids import drop_argv
from orch.waits import wait_until


@dataclass(frozen=True)
class Ran:
    code: int | None
    """None: it did not end within the wait (the process enforces its own limit)."""
    output: bytes
    """The tail of its stdout and stderr."""
    seconds: float


@functools.lru_cache(maxsize=8)
def can_switch(uid: int) -> bool:
    """Whether this process may start one as `uid` itself (setpriv works)."""
    try:
        done = subprocess.run([*drop_argv(uid, uid), "true"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def via_tmux(
    socket: str, argv: list[str], wait: float, output_bytes: int = 64 << 10, poll: Callable[[], bool] | None = None
) -> Ran:
    """Have the tmux server on `socket` run `argv` (which switches uid itself); its tail and exit code. `poll`,
    called at least every second while it runs: True stops the wait (the caller stopped the process)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="orch-switch-") as tmp:
        out, rc, done = (Path(tmp) / name for name in ("out", "rc", "done"))
        shell = f"{{ {shlex.join(argv)} 2>&1; echo $? > {rc}; }} | tail -c {output_bytes} > {out}; touch {done}"
        tmux = shutil.which("tmux") or "tmux"
        subprocess.run([tmux, "-L", socket, "-f", "/dev/null", "run-shell", "-b", shell], check=True, timeout=60)
        try:
            stop = poll or (lambda: False)
            ended = f"{argv[-1][:40]!r} started through tmux to end"
            wait_until(lambda: done.exists() or stop(), wait, ended, watch=Path(tmp))
            wait_until(done.exists, 30.0, ended, watch=Path(tmp))  # stopped: its kill ends it at once
            code = int(rc.read_text().strip())
        except (WaitTimeoutError, OSError, ValueError):
            code = None
        tail = out.read_bytes() if out.exists() else b""
    return Ran(code, tail, time.monotonic() - started)

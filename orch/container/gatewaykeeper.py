"""The keeper of a container run's gateway: `python -m orch.container.gatewaykeeper -- GATEWAY_ARGV...`.

The container's init starts it in place of the gateway, as the gateway's uid with no capability (the same
setpriv step), and hands it the gateway's boot line on stdin. It runs the gateway (`python -m orch.gateway
--handle H`) with that line and, if the gateway's supervisor dies (SIGKILL, the OOM killer), starts it
again with the same line, as the same uid: the new supervisor takes back its address and the workers'
tokens and jobs from its private state beside H (orch.gateway.supervisor), and its server reads the
budget and usage from `model/` (orch.gateway.books), so recording and counting go on where they stopped.

Why here and not in the controller: the controller is the run's uid with no capability, and may neither
write `model/` nor hold the credential; only a process of the gateway's uid that already holds the boot
line can start the gateway again as it was. This one holds nothing the gateway does not (the same uid,
the same line in memory), takes no input from anyone (no socket, no file but the handle it looks for),
and a worker can neither signal it nor read its memory (another uid). The controller only waits for the
gateway to answer again (orch.fleet.rungateway.ensure), and ends the run when this keeper is gone too and the
gateway no longer answers (orch.fleet.rungateway.gone_for_good: the OOM killer took both).

- A first supervisor that exits before it wrote its handle (a failed start) ends the keeper with its exit
  code: the init reports it as before.
- A supervisor that exits 0 was stopped on purpose (SIGTERM, by its uid or root): the keeper ends too.
- SIGTERM or SIGINT to the keeper stops the supervisor (a clean stop) and then the keeper.
- A supervisor that keeps dying young is started again after a pause that doubles from 0.1 s to 5 s.

Standard library only: it stays small (the OOM killer picks the largest processes first).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType

LONG_LIFE = 10.0
"""A supervisor that lived longer than this (seconds) is started again at once."""
FIRST_PAUSE, LAST_PAUSE = 0.1, 5.0


def _handle(argv: list[str]) -> Path | None:
    """The gateway's handle file, from its `--handle H`."""
    if "--handle" in argv and argv.index("--handle") + 1 < len(argv):
        return Path(argv[argv.index("--handle") + 1])
    return None


def _served(handle: Path | None, pid: int) -> bool:
    """Whether supervisor `pid` wrote its handle (it had started serving)."""
    if handle is None:
        return False
    try:
        return bool(json.loads(handle.read_text()).get("pid") == pid)
    except (OSError, ValueError, AttributeError):
        return False


def _ready_fd(argv: list[str]) -> tuple[list[str], int | None]:
    """The gateway's argv without its `--ready-fd N`, and N: the pipe its starter waits on (orch.gateway.process)."""
    if "--ready-fd" in argv and argv.index("--ready-fd") + 1 < len(argv):
        at = argv.index("--ready-fd")
        return argv[:at] + argv[at + 2 :], int(argv[at + 1])
    return argv, None


class Keeper:
    def __init__(self, argv: list[str], line: bytes) -> None:
        self.argv, self.line, self.handle = argv, line, _handle(argv)
        self.later_argv, self.ready_fd = _ready_fd(argv)
        """The first supervisor gets the starter's ready pipe; one started again has no starter waiting."""
        self.stopping = threading.Event()
        self.child: subprocess.Popen[bytes] | None = None

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stopping.set()
        if self.child is not None and self.child.poll() is None:
            self.child.terminate()

    def life(self) -> tuple[int, bool, float]:
        """One supervisor from start to exit: (exit code, it had served, how long it lived)."""
        born = time.monotonic()
        fds = () if self.ready_fd is None else (self.ready_fd,)
        self.child = subprocess.Popen(self.argv, stdin=subprocess.PIPE, pass_fds=fds)
        if self.ready_fd is not None:  # the supervisor holds it alone now: its starter sees EOF if it dies
            os.close(self.ready_fd)
            self.argv, self.ready_fd = self.later_argv, None
        assert self.child.stdin is not None
        try:
            self.child.stdin.write(self.line)
            self.child.stdin.close()
        except BrokenPipeError:
            pass  # it died at once: its exit code says so
        code = self.child.wait()
        return code, _served(self.handle, self.child.pid), time.monotonic() - born

    def run(self) -> int:
        lives, pause = 0, FIRST_PAUSE
        while not self.stopping.is_set():
            lives += 1
            code, served, lived = self.life()
            if self.stopping.is_set() or code == 0:
                return 0
            if lives == 1 and not served:
                return code if code > 0 else 1
            pause = FIRST_PAUSE if lived > LONG_LIFE else min(pause * 2, LAST_PAUSE)
            print(
                f"orch-gateway-keeper: the gateway's supervisor exited ({code}) after {lived:.1f} s; "
                f"starting it again in {pause:g} s",
                file=sys.stderr,
                flush=True,
            )
            self.stopping.wait(pause)
        return 0


def main(argv: list[str]) -> int:
    if argv[:1] != ["--"] or len(argv) < 2:
        print("usage: python -m orch.container.gatewaykeeper -- GATEWAY_ARGV...", file=sys.stderr)
        return 2
    line = sys.stdin.buffer.readline()  # the boot line, credentials included: kept in memory only
    sys.stdin.close()
    keeper = Keeper(argv[1:], line if line.endswith(b"\n") else line + b"\n")
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, keeper.on_signal)
    return keeper.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The gateway's server child as a fork of its supervisor (orch.gateway.supervisor).

The supervisor imports the server (aiohttp, pydantic, the gateway's modules) once, then forks each server child
from itself: a run pays that import once instead of twice (bench/README.md, "Process starts"), and a restart
costs a fork. The child is what an exec'd child was, nothing more:

- it serves the supervisor's socket and reports on its own pipe; it is handed its ChildStart in memory;
- it holds nothing else of the supervisor's: stdin is /dev/null, and every other descriptor the supervisor
  had at the fork (the starter's ready pipe, the scripted model's ready pipe) is closed in the child;
- it dies with its supervisor (PR_SET_PDEATHSIG, then a look that the supervisor had not died before that);
- the supervisor's signal handlers are not its own: SIGTERM and SIGINT are blocked across the fork and set
  back to their defaults in the child before they are unblocked (the server installs its own);
- it never returns into the supervisor's code: it ends with os._exit, whatever happens.

A fork is safe only from a process of one thread (another thread could hold a lock the child then waits on for
ever): `fork_server` refuses to fork otherwise. The supervisor starts none.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Collection

from orch.errors import OrchError
from orch.gateway.wire import ChildStart
from orch.waits import wait_until

_PR_SET_PDEATHSIG = 1
NO_CA_FILE = {"SSL_CERT_FILE": os.devnull}
"""The environment of a process that opens no TLS connection: aiohttp's import loads the CA bundle twice (its
default SSL contexts), 40 % of that import; OpenSSL reads this file instead (bench/README.md, "Process starts")."""
_STOPS = {signal.SIGTERM, signal.SIGINT}


def die_with_parent() -> None:
    """The kernel sends this process SIGTERM when its parent dies (even by SIGKILL); a preexec_fn too."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def import_server(live: bool) -> None:
    """Import the server child's code into this process (the supervisor) before its first fork. A gateway with
    no `api` upstream (offline, replay) opens no TLS connection: its environment gets NO_CA_FILE first, since
    aiohttp reads the CA bundle as it is imported; a live one keeps its CA bundle for its children."""
    if not live:
        os.environ.update(NO_CA_FILE)
    import orch.gateway.server  # noqa: F401  (the import is the point)


class ServerChild:
    """A forked server child: as much of subprocess.Popen as the supervisor uses, on its pid."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def _reaped(self, flags: int) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, flags)
            except ChildProcessError:  # reaped by a poll in between (a signal handler's): returncode says
                return self.returncode
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        return self._reaped(os.WNOHANG)

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code (-N: killed by signal N); WaitTimeoutError if it still runs after `timeout` seconds."""
        if timeout is None:
            code = self._reaped(0)
            assert code is not None
            return code
        wait_until(lambda: self.poll() is not None, timeout, f"server child {self.pid} to exit", interval=0.01)
        assert self.returncode is not None
        return self.returncode

    def signal(self, signum: int) -> None:
        """Signal it unless it was reaped (its pid is ours until then, even as a zombie)."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.signal(signal.SIGTERM)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)


def fork_server(start: ChildStart, sock: socket.socket, report_fd: int, close: Collection[int]) -> ServerChild:
    """Fork a server child serving `sock`, reporting on `report_fd`; `close`: descriptors of the supervisor's
    that the child must not hold. Call import_server first. The caller closes its copy of `report_fd`."""
    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if others:
        raise OrchError(f"the gateway's supervisor runs other threads ({', '.join(others)}): it may not fork")
    for stream in (sys.stdout, sys.stderr):  # what is buffered is written once, not again by the child
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    parent = os.getpid()
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
    try:
        pid = os.fork()
        if pid == 0:
            _child(start, sock, report_fd, close, parent)  # never returns
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)
    return ServerChild(pid)


def _child(start: ChildStart, sock: socket.socket, report_fd: int, close: Collection[int], parent: int) -> None:
    code = 70  # EX_SOFTWARE: something below failed before the server could say why
    try:
        for signum in _STOPS:
            signal.signal(signum, signal.SIG_DFL)
        die_with_parent()
        if os.getppid() != parent:  # the supervisor died before the line above: nobody would stop this one
            return
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)
        for fd in close:
            with contextlib.suppress(OSError):
                os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        from orch.gateway.server import serve

        code = serve(start, sock, report_fd)
    except OrchError as exc:
        print(f"orch gateway: {exc.one_line()}", file=sys.stderr)
        code = exc.exit_code
    except BaseException:  # a crash is its exit code and a traceback, never the supervisor's
        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)

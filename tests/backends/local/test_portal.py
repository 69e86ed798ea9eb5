"""A sandbox's portal (orch.backends.local.portal) as a real process: it binds its ports, becomes ARGV, and copies
every connection both ways to its socket (an echo server here) in a child of its own: both directions, a
half-close passed on, many at once, a refused upstream closing the client, and a usage error in one line."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from orch.backends.local import portal
from orch.procs import alive, children
from orch.waits import wait_until

PORTAL = portal.__file__
PORT_TRIES = 5


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def echo(tmp_path: Path) -> Iterator[Path]:
    """A Unix socket that echoes each connection upper-cased, then ends its side when the client ends its."""
    path = tmp_path / "echo.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(64)

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data.upper())
            conn.shutdown(socket.SHUT_WR)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield path
    server.close()


@pytest.fixture
def started(echo: Path, tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[bytes], Path]]:
    """The portal on a free port to `echo`, then ARGV: a process that waits on its stdin. The port is free when
    picked and released for the portal to bind (in a sandbox its port is its own); another process on this
    shared machine may bind it first, and the portal then exits: it is started again on another port."""
    err = tmp_path / "portal.err"
    for _ in range(PORT_TRIES):
        port = _free_port()
        argv = [sys.executable, "-S", PORTAL, f"127.0.0.1:{port}", str(echo), "--", "cat"]
        with err.open("wb") as stderr:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=stderr)

        def serving(proc: subprocess.Popen[bytes] = proc) -> bool:
            became = Path(f"/proc/{proc.pid}/exe").resolve().name == "cat"  # ARGV replaced it
            return (became and bool(children(proc.pid))) or proc.poll() is not None

        wait_until(serving, 30.0, "the portal to serve and become ARGV")
        if proc.poll() is None or "Address already in use" not in err.read_text():
            break
    yield port, proc, echo
    listeners = children(proc.pid) or []  # read before the kill: once it is reaped, init is their parent
    proc.kill()
    proc.wait()
    for child in listeners:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, 9)


def _talk(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
        conn.sendall(payload)
        conn.shutdown(socket.SHUT_WR)  # the half-close travels to the echo, whose own end comes back
        got = b""
        while chunk := conn.recv(65536):
            got += chunk
    return got


def test_the_portal_becomes_argv_and_copies_both_ways(started: tuple[int, subprocess.Popen[bytes], Path]) -> None:
    port, proc, _ = started
    assert proc.poll() is None
    assert _talk(port, b"hello") == b"HELLO"
    big = os.urandom(3 << 20).hex().encode()[: 3 << 20]
    assert _talk(port, big) == big.upper()


def test_many_connections_at_once(started: tuple[int, subprocess.Popen[bytes], Path]) -> None:
    port, _, _ = started
    results: dict[int, bytes] = {}
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, _talk(port, b"x%d" % i))) for i in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results == {i: b"X%d" % i for i in range(40)}


def test_a_refused_upstream_closes_the_client(started: tuple[int, subprocess.Popen[bytes], Path]) -> None:
    port, proc, echo = started
    echo.unlink()  # nobody listens there any more
    with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
        try:
            conn.sendall(b"anyone?")
            assert conn.recv(65536) == b""
        except ConnectionResetError:
            pass  # closed before it read what was sent: reset, not ended
    assert proc.poll() is None and all(alive(c) for c in children(proc.pid))  # and it serves on


def test_a_bad_command_line_is_one_line_and_exit_2() -> None:
    done = subprocess.run([sys.executable, "-S", PORTAL, "nohost", "--", "true"], capture_output=True, text=True)
    assert (done.returncode, done.stderr.count("\n")) == (2, 1) and done.stderr.startswith("usage: portal.py")

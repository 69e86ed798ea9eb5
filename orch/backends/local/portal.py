"""A sandboxed worker's first process: `python -S portal.py HOST:PORT SOCKET [HOST:PORT SOCKET]... -- ARGV...`.

Inside a local strict sandbox (orch.backends.local.bwrap) there is no network: this listens on the gateway's own
loopback address, so the worker's base URL stays as it is, and copies every connection to SOCKET, the
worker's own way to the gateway (orch.backends.local.relay on the host); more pairs are its hooks' port
(orch.backends.local.httphooks) and, when the run allows egress, its proxy's (orch.backends.local.egressproxy).
The listeners are bound before ARGV starts, then served by a child in a session of its own (a Ctrl-C for the
agent does not reach it), and ARGV replaces this process.

It starts before every agent, so it imports only the interpreter's C modules: `_socket` and `_thread`, not
socket (enum) or asyncio, whose import alone cost four times the rest of it. Each connection is copied by two
threads, one a way: a worker holds a few (its agent's pool to the gateway, one per hook event), and each
thread sleeps in a blocking call until its bytes come.
"""

from __future__ import annotations

import _socket
import _thread
import errno
import os
import sys
import time

CHUNK = 1 << 16
BACKLOG = 128


def _pump(source: _socket.socket, sink: _socket.socket, ends: list[int], lock: _thread.LockType) -> None:
    """Copy one way until its end; the second way to end closes both sockets."""
    try:
        while data := source.recv(CHUNK):
            sink.sendall(data)
        sink.shutdown(_socket.SHUT_WR)  # the other side's end of input, passed on
    except OSError:
        pass
    with lock:
        ends[0] += 1
        last = ends[0] == 2
    if last:
        source.close()
        sink.close()
    else:  # the other way may be blocked sending to us: a failed way wakes it
        try:  # noqa: SIM105 - contextlib's import would cost more than the rest of this module
            source.shutdown(_socket.SHUT_RD)
        except OSError:
            pass


def _copy(client: _socket.socket, target: str) -> None:
    upstream = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        upstream.connect(target)
    except OSError:
        upstream.close()
        client.close()
        return
    ends, lock = [0], _thread.allocate_lock()
    _thread.start_new_thread(_pump, (upstream, client, ends, lock))
    _pump(client, upstream, ends, lock)


def _accept(listener: _socket.socket, target: str) -> None:
    while True:
        try:
            fd, _ = listener._accept()  # type: ignore[attr-defined]  # typeshed lacks the C socket's own accept
        except OSError as exc:  # a connection reset before it was taken, or out of descriptors for a moment
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                time.sleep(0.01)  # a back-off while descriptors are out, not a wait for a state
            continue
        _thread.start_new_thread(_copy, (_socket.socket(fileno=fd), target))


def _listen(address: str) -> _socket.socket:
    host, _, port = address.rpartition(":")
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    listener.bind((host, int(port)))
    listener.listen(BACKLOG)
    return listener


def main(argv: list[str]) -> int:
    pairs = argv[: argv.index("--")] if "--" in argv else []
    command = argv[len(pairs) + 1 :]
    if not pairs or len(pairs) % 2 or not command or not all(":" in a for a in pairs[::2]):
        print("usage: portal.py HOST:PORT SOCKET [HOST:PORT SOCKET]... -- ARGV...", file=sys.stderr)
        return 2
    listeners = [(_listen(address), target) for address, target in zip(pairs[::2], pairs[1::2], strict=True)]
    if os.fork() == 0:
        os.setsid()
        try:
            for listener, target in listeners[1:]:
                _thread.start_new_thread(_accept, (listener, target))
            _accept(*listeners[0])
        finally:
            os._exit(0)
    for listener, _ in listeners:
        listener.close()
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

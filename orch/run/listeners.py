"""The controller's end of the bus under strict isolation: one thread, one asyncio loop, any number of
listening sockets, every post stamped with who sent it.

Each listening socket names its sender one of two ways:
- by the connection (`listen(path)`, the run's `bus.sock`): SO_PEERCRED's uid is the worker
  (orch.run.uids), for workers that each have a uid of their own;
- fixed (`listen(path, worker=N)`): every post on that socket is worker N's, whatever its uid, for a
  socket only worker N can reach (a per-worker socket bound into its sandbox).

Either way `--as` can only name the sender itself. One post per connection, one JSON line each way
(orch.run.bus.PostRequest, its client `post_through_controller`). A single loop answers every writer
in turn, so a worker that connects and sends nothing (or slowly) holds up nobody: its read times out.
A worker holds at most PEER_CONNECTIONS open at once (per fixed socket, else per uid): past that a
connection gets its one refusal line at once, and an event at most once a minute (orch.run.refusals), so no
worker can spend the controller's file descriptors or flood events.jsonl; the controller's own uid is not capped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from orch.errors import OrchError, UsageError
from orch.run.bus import (
    MAX_REQUEST,
    MAX_TEXT,
    SOCKET_TIMEOUT,
    Appender,
    PostRequest,
    peer_uid,
    post,
    stamp_sender,
)
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent
from orch.run.refusals import RefusalLog
from orch.run.uids import worker_of

BACKLOG = 256  # every worker of a big fleet posting at once must queue, not be refused
PEER_CONNECTIONS = 8
"""Open connections per worker: an honest one holds one per post it is making (a few at once at most)."""


@dataclass(frozen=True)
class Listener:
    path: Path
    worker: int | None
    """Fixed: every post on this socket is this worker's. None: the sender comes from SO_PEERCRED."""


class BusServer:
    """Serves `run.bus_socket` (SO_PEERCRED identities) and whatever else `listen` adds.

    `start()` serves in a thread of its own, `serve_forever()` in this one; `stop()` ends either and
    removes every socket file it made."""

    def __init__(self, run: RunFolder, peercred: bool = True) -> None:
        """`peercred`: serve `run.bus_socket` too (identities from SO_PEERCRED); the local relay serves only
        per-worker sockets (orch.backends.local.relay), the controller serves `bus.sock`."""
        self.run = run
        self.run_uid = os.geteuid()
        self.workers = run.info().workers
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()
        self._sockets: dict[Path, tuple[socket.socket, Listener]] = {}
        self._servers: dict[Path, asyncio.Server] = {}
        self._running = False
        self._closed = False
        self._stopping: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._served = threading.Event()
        self._open: set[_Connection] = set()
        self._outgoing: list[tuple[asyncio.Transport, bytes]] = []
        self._appender = Appender(run)  # bus.md and its lock stay open: the loop writes every post
        self._per_peer: dict[tuple[str, int], int] = {}
        self._refusals = RefusalLog(run)
        if peercred:
            self.listen(run.bus_socket)

    def listen(self, path: Path, worker: int | None = None) -> None:
        """Accept posts on `path` too (bound before this returns); `worker`: every post there is his."""
        if worker is not None and not 1 <= worker <= self.workers:
            raise UsageError(f"worker {worker} is out of range", hint=f"use 1 to {self.workers}")
        path.unlink(missing_ok=True)  # a dead controller's
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(path))
            # Whoever can reach the path may connect: the folder it sits in decides who that is.
            os.chmod(path, 0o666)
            sock.listen(BACKLOG)
        except OSError:
            sock.close()
            raise
        listener = Listener(path, worker)
        with self._lock:
            self._sockets[path] = (sock, listener)
            running = self._running
        if running:  # connections queue in the backlog until the loop takes the socket
            asyncio.run_coroutine_threadsafe(self._serve_socket(sock, listener), self._loop).result(SOCKET_TIMEOUT)

    def start(self) -> BusServer:
        self._thread = threading.Thread(target=self.serve_forever, name="orch-bus", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()
            self._served.set()

    def stop(self) -> None:
        with self._lock:
            self._closed = True
            stopping = self._stopping if self._running else None
        if stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self._loop.call_soon_threadsafe(stopping.set)
            self._served.wait(SOCKET_TIMEOUT)  # the loop lets go of the sockets before they close
        with self._lock:
            for path, (sock, _) in self._sockets.items():
                sock.close()
                path.unlink(missing_ok=True)
            self._sockets.clear()
        if stopping is None and not self._loop.is_running():
            self._loop.close()  # never served (a closed loop closes again as a no-op)

    async def _main(self) -> None:
        self._stopping = asyncio.Event()
        with self._lock:
            if self._closed:
                return
            pending = list(self._sockets.values())
            self._running = True
        try:
            for sock, listener in pending:
                await self._serve_socket(sock, listener)
            await self._stopping.wait()
        finally:
            with self._lock:
                self._running = False
            for server in self._servers.values():
                server.close()
            for connection in list(self._open):  # a stalled poster's: ended here, not on a closed loop
                connection.abort()
            self._appender.close()

    async def _serve_socket(self, sock: socket.socket, listener: Listener) -> None:
        server = await self._loop.create_unix_server(lambda: _Connection(self, listener), sock=sock)
        self._servers[listener.path] = server

    def _answer(self, line: bytes, uid: int, listener: Listener) -> bytes:
        """The reply line to one request; a post refused for who sent it is logged as an event."""
        try:
            if len(line) > MAX_REQUEST:
                raise UsageError("bus message too long", hint=f"keep it under {MAX_TEXT} characters")
            request = PostRequest.model_validate_json(line)
            if listener.worker is None:
                sender = stamp_sender(uid, request.sender, self.run_uid)
            else:
                sender = stamp_sender(uid, request.sender, self.run_uid, fixed=listener.worker)
            if sender is not None and not 1 <= sender <= self.workers:
                raise UsageError(f"worker {sender} is out of range", hint=f"use 1 to {self.workers}")
            post(self.run, sender, request.text, self._appender)
            return b'{"ok": true}\n'
        except OrchError as exc:
            who = listener.worker if listener.worker is not None else worker_of(uid)
            data = {"uid": uid, "claimed": _claimed(line), "error": exc.one_line()}
            if listener.worker is not None:
                data["socket"] = listener.path.name
            self.run.log_event(ControllerEvent(event=Event.BUS_POST_REFUSED, worker=who, data=data))
            return PostRequest.reply(False, exc.one_line())
        except (ValidationError, ValueError):
            return PostRequest.reply(False, "malformed bus request")

    def _send_later(self, transport: asyncio.Transport, reply: bytes) -> None:
        """Queue a reply for the end of this turn of the loop. Sending one wakes its poster, which on a
        busy machine takes the CPU from this thread there and then: posts that arrived together are all
        written to bus.md first, and their replies sent together, so none waits behind another's wake-up."""
        if not self._outgoing:
            self._loop.call_soon(self._flush)
        self._outgoing.append((transport, reply))

    def _flush(self) -> None:
        outgoing, self._outgoing = self._outgoing, []
        for transport, reply in outgoing:
            if not transport.is_closing():
                transport.write(reply)
                transport.close()  # after the reply is flushed

    def _admit(self, connection: _Connection) -> bool:
        """Count a new connection against its peer's cap; False (and the burst flagged once) past it."""
        peer = connection.peer
        if peer == ("uid", self.run_uid):
            return True
        if self._per_peer.get(peer, 0) >= PEER_CONNECTIONS:
            who = connection.listener.worker if peer[0] == "worker" else worker_of(peer[1])
            socket_name = connection.listener.path.name
            data: dict[str, object] = {"uid": connection.uid, "open": PEER_CONNECTIONS, "socket": socket_name}
            self._refusals.refuse((peer, socket_name), Event.CONNECTIONS_CAPPED, who, data)
            return False
        self._per_peer[peer] = self._per_peer.get(peer, 0) + 1
        return True

    def _release(self, connection: _Connection) -> None:
        left = self._per_peer.get(connection.peer, 0) - 1
        if left > 0:
            self._per_peer[connection.peer] = left
        else:
            self._per_peer.pop(connection.peer, None)


class _Connection(asyncio.Protocol):
    """One post: a request line in (within SOCKET_TIMEOUT, else dropped), one reply line out, closed.
    A protocol, not a stream task: no task or wait_for per post, which is most of a post's cost here."""

    def __init__(self, server: BusServer, listener: Listener) -> None:
        self.server = server
        self.listener = listener
        self.data = bytearray()
        self.transport: asyncio.Transport | None = None
        self.uid = -1
        self.timer: asyncio.TimerHandle | None = None
        self.admitted = False

    @property
    def peer(self) -> tuple[str, int]:
        """Whose connection this is, for the cap: the socket's own worker, else the uid."""
        return ("worker", self.listener.worker) if self.listener.worker is not None else ("uid", self.uid)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.uid = peer_uid(transport.get_extra_info("socket"))
        self.admitted = self.server._admit(self)
        if not self.admitted:
            error = f"too many open bus connections: at most {PEER_CONNECTIONS} at once per worker"
            transport.write(PostRequest.reply(False, error))
            transport.close()
            return
        self.timer = self.server._loop.call_later(SOCKET_TIMEOUT, self.abort)
        self.server._open.add(self)

    def data_received(self, data: bytes) -> None:
        self.data += data
        end = self.data.find(b"\n")
        if end >= 0:
            self._reply(bytes(self.data[: end + 1]))
        elif len(self.data) > MAX_REQUEST:
            self._reply(bytes(self.data))  # refused as too long

    def eof_received(self) -> bool:
        if self.data:
            self._reply(bytes(self.data))  # a last line without its newline still counts
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.server._open.discard(self)
        if self.admitted:
            self.server._release(self)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def _reply(self, line: bytes) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.pause_reading()
        self.server._send_later(transport, self.server._answer(line, self.uid, self.listener))


def _claimed(line: bytes) -> int | None:
    with contextlib.suppress(ValueError):
        return PostRequest.model_validate_json(line).sender
    return None

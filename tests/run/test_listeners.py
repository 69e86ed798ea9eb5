"""The bus server (orch/run/listeners.py): one loop serving bus.sock (the sender stamped from SO_PEERCRED) and
sockets of a fixed worker beside it; a worker flooding it with idle connections is capped."""

from __future__ import annotations

import json
import select
import socket
from pathlib import Path

import pytest

from orch.errors import UsageError
from orch.run import bus
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.listeners import PEER_CONNECTIONS, BusServer
from orch.waits import wait_until


def test_fixed_identity_sockets_beside_the_peercred_one(run: RunFolder, tmp_path: Path) -> None:
    """One server, several sockets: bus.sock stamps from SO_PEERCRED (here the run's own uid, which may
    name anyone), a worker's own socket stamps its worker whatever is claimed; a stalled connection holds
    up no one; stop() removes every socket file."""
    server = BusServer(run).start()
    own = tmp_path / "w3.sock"
    try:
        server.listen(own, worker=3)  # added while serving
        stalled = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stalled.connect(str(own))  # connects and says nothing
        bus.post_through_controller(run, 5, "as the run")
        bus.post_through_controller(run, None, "from my own socket", path=own)
        with pytest.raises(UsageError, match="you are worker 3"):
            bus.post_through_controller(run, 4, "posing as 4", path=own)
        stalled.close()
        with pytest.raises(UsageError, match="out of range"):
            server.listen(tmp_path / "w99.sock", worker=99)
    finally:
        server.stop()
    assert [line.split(" ", 1)[1] for line in bus.read_lines(run)] == ["[W5] as the run", "[W3] from my own socket"]
    refused = [e for e in map(json.loads, run.events.read_text().splitlines()) if e["event"] == Event.BUS_POST_REFUSED]
    assert [(e["worker"], e["data"]["claimed"], e["data"]["socket"]) for e in refused] == [(3, 4, "w3.sock")]
    assert not own.exists() and not run.bus_socket.exists()


def test_a_worker_holding_many_idle_connections_is_capped_and_the_others_post(run: RunFolder, tmp_path: Path) -> None:
    """A hostile worker opens a flood of bus connections and says nothing on them, to spend the
    controller's file descriptors: past its cap each gets one refusal line at once (not a 10 s hold), the
    burst is one flagged event, the honest workers' posts land, and once it lets go it may post again."""
    server = BusServer(run, peercred=False).start()
    sockets = {n: tmp_path / f"w{n}.sock" for n in (1, 2, 3)}
    for n, path in sockets.items():
        server.listen(path, worker=n)
    held: list[socket.socket] = []
    try:
        for _ in range(PEER_CONNECTIONS + 40):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(bus.SOCKET_TIMEOUT)
            sock.connect(str(sockets[3]))
            held.append(sock)
        excess = len(held) - PEER_CONNECTIONS

        def answered() -> list[socket.socket]:
            return select.select(held, [], [], 0)[0]

        wait_until(lambda: len(answered()) >= excess, 10, "the excess connections' refusals")
        refusals = [sock.recv(4096) for sock in answered()]
        assert len(server._open) <= PEER_CONNECTIONS
        bus.post_through_controller(run, None, "honest one", path=sockets[1])
        bus.post_through_controller(run, None, "honest two", path=sockets[2])
        with pytest.raises(UsageError, match="too many open bus connections"):
            bus.post_through_controller(run, None, "one more from three", path=sockets[3])
        for sock in held:
            sock.close()
        held.clear()
        wait_until(lambda: not server._open, 10, "the held connections to close")
        bus.post_through_controller(run, None, "three again", path=sockets[3])
    finally:
        for sock in held:
            sock.close()
        server.stop()
    assert len(refusals) == 40 and all(b"too many open bus connections" in r for r in refusals)
    texts = [line.split(" ", 1)[1] for line in bus.read_lines(run)]
    assert texts == ["[W1] honest one", "[W2] honest two", "[W3] three again"]
    capped = [e for e in map(json.loads, run.events.read_text().splitlines()) if e["event"] == Event.CONNECTIONS_CAPPED]
    assert [(e["worker"], e["data"]["socket"]) for e in capped] == [(3, "w3.sock")]

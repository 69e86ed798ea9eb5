"""The bus under concurrent writers: nothing lost, torn, or reordered within a writer."""

from __future__ import annotations

import json
import multiprocessing
import os
import select
import socket
import threading
from pathlib import Path

import pytest

from orch.errors import UsageError
from orch.run import bus
from orch.run.busserver import PEER_CONNECTIONS, BusServer
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.waits import wait_until
from tests.helpers import orch, run_info

WRITERS = 16
POSTS = 200


@pytest.fixture
def run(tmp_path: Path) -> RunFolder:
    folder = RunFolder.for_name("busrun")
    folder.create(run_info("busrun", workers=WRITERS, workdir=str(tmp_path)))
    return folder


def _writer(root: str, worker: int, through: str) -> None:
    folder = RunFolder(Path(root))
    post = bus.post_through_controller if through == "socket" else bus.post
    for i in range(POSTS):
        post(folder, worker, f"post {i} " + "x" * 300)


def _serve(root: str) -> None:
    BusServer(RunFolder(Path(root))).serve_forever()


@pytest.mark.parametrize("through", ["file", "socket"])
def test_concurrent_posts_are_never_lost_torn_or_reordered(run: RunFolder, through: str) -> None:
    """16 writers at once: appending under the lock, or (strict isolation) through the controller's socket,
    whose backlog must queue them all rather than refuse one."""
    ctx = multiprocessing.get_context("fork")
    # The controller's bus server runs in a process of its own, as serve-run does (forking writers from a
    # process whose server thread is serving leaves them waiting on the server until they time out).
    server = ctx.Process(target=_serve, args=(str(run.root),)) if through == "socket" else None
    procs = [ctx.Process(target=_writer, args=(str(run.root), w, through)) for w in range(1, WRITERS + 1)]
    try:
        if server is not None:
            server.start()
            wait_until(run.bus_socket.exists, 30, "the bus server to listen")
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
            assert p.exitcode == 0
    finally:
        if server is not None:
            server.kill()
            server.join(30)
    lines = bus.read_lines(run)
    assert len(lines) == WRITERS * POSTS
    seen: dict[str, list[int]] = {}
    for raw in lines:
        parsed = bus.parse_line(raw)
        assert parsed is not None, f"torn line: {raw[:80]}"
        seen.setdefault(parsed.sender, []).append(int(parsed.text.split()[1]))
    assert all(order == list(range(POSTS)) for order in seen.values())


def test_multiline_text_stays_one_line(run: RunFolder) -> None:
    bus.post(run, 2, "first\nsecond")
    (line,) = bus.read_lines(run)
    assert line.endswith("[W2] first\\nsecond")
    assert bus.last_line_of(run, 2) == line


@pytest.mark.parametrize(
    "text",
    ["", "   ", b"\xff\xfe", b"a\x00b", os.fsdecode(b"caf\xe9")],
    ids=["empty", "blank", "non-utf8", "nul", "non-utf8-argv"],
)
def test_bad_messages_are_refused(run: RunFolder, text: str | bytes) -> None:
    with pytest.raises(UsageError):
        bus.post(run, 1, text)
    assert bus.read_lines(run) == []


def test_cli_post_and_tail(run: RunFolder) -> None:
    assert orch("bus", "post", "busrun", "--as", "3", "hello", "bus").exit_code == 0
    assert orch("bus", "post", "busrun", "from the lead").exit_code == 0
    out = orch("bus", "tail", "busrun").output.splitlines()
    assert out[0].endswith("[W3] hello bus") and out[1].endswith("[lead] from the lead")
    bad = orch("bus", "post", "busrun", "--as", "99", "x")
    assert bad.exit_code == 2 and "out of range" in bad.output


def test_cli_post_reads_stdin_for_dash(run: RunFolder) -> None:
    assert orch("bus", "post", "busrun", "--as", "2", "-", input="piped\ntext\n").exit_code == 0
    assert bus.read_lines(run)[-1].endswith("[W2] piped\\ntext")
    empty = orch("bus", "post", "busrun", "-", input="")
    assert empty.exit_code == 2 and "empty bus message" in empty.output
    assert len(bus.read_lines(run)) == 1


def test_follow_sees_new_lines_as_they_are_posted(run: RunFolder) -> None:
    bus.post(run, 1, "before following")
    seen: list[str] = []
    follower = bus.follow(run, start_at_end=True)

    def consume() -> None:
        for line in follower:
            seen.append(line)
            if len(seen) == 2:
                return

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    bus.post(run, 2, "first new")
    bus.post(run, 3, "second new")
    wait_until(lambda: len(seen) == 2, 10, "the follower to see both lines")
    assert [line.split("] ", 1)[1] for line in seen] == ["first new", "second new"]


STAMPS: dict[str, tuple[int, int | None, int | None, int | str | None]] = {
    # uid, claimed (--as), the socket's fixed worker, expected
    "worker-unnamed": (62001, None, None, 1),
    "worker-names-itself": (62002, 2, None, 2),
    "worker-poses-as-another": (62001, 2, None, "can only name yourself"),
    "not-a-worker": (61000, None, None, "not a worker of this run"),
    "the-run-itself-names-anyone": (1000, 3, None, 3),
    "the-run-itself-as-the-lead": (1000, None, None, None),
    # A socket of one worker's own (fixed: 3): the uid says nothing, not even the run's own.
    "fixed-socket-unnamed": (1000, None, 3, 3),
    "fixed-socket-names-itself": (1000, 3, 3, 3),
    "fixed-socket-poses-as-another": (1000, 2, 3, "can only name yourself"),
    "fixed-socket-another-workers-uid": (62001, None, 3, 3),
}


@pytest.mark.parametrize(("uid", "claimed", "fixed", "expected"), STAMPS.values(), ids=STAMPS.keys())
def test_the_sender_is_the_connections_uid(
    uid: int, claimed: int | None, fixed: int | None, expected: int | str | None
) -> None:
    """Strict isolation: who a post is from comes from the socket's peer (orch.run.uids) or the socket
    itself, never from the poster."""
    if isinstance(expected, str):
        with pytest.raises(UsageError, match=expected):
            bus.stamp_sender(uid, claimed, run_uid=1000, fixed=fixed)
    else:
        assert bus.stamp_sender(uid, claimed, run_uid=1000, fixed=fixed) == expected


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

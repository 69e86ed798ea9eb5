"""The bus under concurrent writers: nothing lost, torn, or reordered within a writer."""

from __future__ import annotations

import multiprocessing
import os
import threading
from pathlib import Path

import pytest

from orch.errors import UsageError
from orch.run import bus
from orch.run.folder import RunFolder
from orch.run.listeners import BusServer
from orch.waits import wait_until
from tests.helpers import orch
from tests.run.conftest import WRITERS

POSTS = 200


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

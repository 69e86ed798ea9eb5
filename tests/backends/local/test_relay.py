"""The relay's pane socket (orch.backends.local.relay `pane-N.sock`), on a real tmux server: a worker's helper
(aider's watcher, Gemini CLI's approver, under local strict isolation) reads its own pane's screen, pastes
into it and presses Enter there, and can do nothing else: no other pane, no other tmux command, no flood of
connections, no delay to another worker's pane requests, no unlogged probe of another's pane. And a worker's
gateway socket refuses a flood of connections past its cap."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from orch.backends.local import relay
from orch.backends.local.connections import ConnectionCap
from orch.backends.local.relay import GATEWAY_REFUSAL, PANE_CONNECTIONS, PANE_REQUEST, _Pane, _to_gateway
from orch.contracts import LaunchSpec
from orch.fleet.tmux import TmuxServer
from orch.run import refusals
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.paths import sockets_dir
from orch.waits import wait_until
from tests.helpers import orch, run_events, run_info
from tests.hostile import half_sent


@pytest.fixture
def run(tmp_path: Path) -> RunFolder:
    folder = RunFolder.for_name("relayrun")
    folder.create(run_info("relayrun", workers=2, workdir=str(tmp_path)))
    return folder


def _capped(run: RunFolder) -> list[tuple[int, str]]:
    return [(e["worker"], e["data"]["socket"]) for e in run_events(run, Event.CONNECTIONS_CAPPED)]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[TmuxServer]:
    """Two panes (workers 1 and 2), each a `cat` that echoes what is typed into it."""
    srv = TmuxServer(f"orch-test-{uuid.uuid4().hex[:8]}")
    srv.start("relay-test", LaunchSpec(argv=["cat"], cwd=tmp_path), 1, {"PATH": "/usr/bin:/bin"})
    srv.add_pane(LaunchSpec(argv=["cat"], cwd=tmp_path), 2)
    yield srv
    srv.kill()


def _ask(
    server: TmuxServer, run: RunFolder, requests: list[bytes], hold: int = 0, peers: set[int] | None = None
) -> list[dict[str, object]]:
    """Serve worker 1's pane on a socket of its own (answering only `peers`' uids, when given) and send each
    request on a connection of its own, while `hold` other connections stay open and silent; the answers."""

    async def go() -> list[dict[str, object]]:
        path = Path(f"/tmp/orch-pane-test-{uuid.uuid4().hex[:8]}.sock")
        pane = _Pane(server, 1, ConnectionCap(run, 1, path, PANE_CONNECTIONS), peers)
        listening = await asyncio.start_unix_server(pane.serve, path=str(path), limit=PANE_REQUEST)
        held = [await asyncio.open_unix_connection(str(path)) for _ in range(hold)]
        deadline = asyncio.get_running_loop().time() + 10
        while pane.cap.open < hold:  # the server has taken the held connections before the next comes
            assert asyncio.get_running_loop().time() < deadline, "the relay never took the held connections"
            await asyncio.sleep(0.01)
        answers = []
        try:
            for request in requests:
                reader, writer = await asyncio.open_unix_connection(str(path))
                writer.write(request)
                await writer.drain()
                line = await reader.readline()
                answers.append(json.loads(line) if line else {})
                writer.close()
        finally:
            for _, writer in held:
                writer.close()
            listening.close()
            path.unlink(missing_ok=True)
        return answers

    return asyncio.run(go())


def _line(request: Mapping[str, object]) -> bytes:
    return json.dumps(request).encode() + b"\n"


def test_a_pane_socket_reaches_its_own_pane_only(server: TmuxServer, run: RunFolder) -> None:
    panes = server.panes()
    other = panes[2].pane_id
    answers = _ask(
        server,
        run,
        [
            _line({"op": "paste", "text": "typed-by-one"}),
            _line({"op": "enter"}),
            # a target of its own choosing, or another tmux command: ignored, refused
            _line({"op": "paste", "text": "aimed-at-two", "target": other, "pane": other}),
            _line({"op": "send-keys", "keys": ["C-c"]}),
            _line({"op": "run-shell", "text": "touch /tmp/pwned"}),
            b"not json\n",
            b"x" * (PANE_REQUEST + 10) + b"\n",  # over the limit: dropped, no answer
        ],
    )
    assert answers[0] == {"ok": True} and answers[1] == {"ok": True} and answers[2] == {"ok": True}
    assert [a["ok"] for a in answers[3:6]] == [False, False, False] and answers[6] == {}
    # Both pastes are drawn by the pane's shell after tmux answered: wait for the screen to show them.
    shown = ("typed-by-one", "aimed-at-two")
    wait_until(lambda: all(t in server.capture(panes[1].pane_id) for t in shown), 10, "both pastes in pane 1")
    (screen,) = _ask(server, run, [_line({"op": "screen"})])
    assert "typed-by-one" in str(screen["screen"]) and "aimed-at-two" in str(screen["screen"])
    assert "typed-by-one" not in server.capture(other) and "aimed-at-two" not in server.capture(other)


def test_a_flood_of_pane_connections_is_refused_past_the_cap(server: TmuxServer, run: RunFolder) -> None:
    (refused,) = _ask(server, run, [_line({"op": "screen"})], hold=PANE_CONNECTIONS)
    assert refused["ok"] is False and "too many open pane connections" in str(refused["error"])
    (answered,) = _ask(server, run, [_line({"op": "screen"})], hold=PANE_CONNECTIONS - 1)
    assert answered["ok"] is True
    assert [worker for worker, _ in _capped(run)] == [1]  # the burst flagged once


def test_a_flood_of_gateway_connections_is_refused_past_the_cap(run: RunFolder) -> None:
    """Worker 2 holds its gateway socket's every allowed connection open (an echo server stands for the
    gateway): the next is refused at once with a 503, the burst flagged once; once it lets go, it gets in."""

    async def go() -> tuple[bytes, bytes]:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while data := await reader.read(1024):
                writer.write(data)
            writer.close()

        upstream = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = upstream.sockets[0].getsockname()[1]
        path = Path(f"/tmp/orch-gw-test-{uuid.uuid4().hex[:8]}.sock")
        cap = ConnectionCap(run, 2, path, 3)
        listening = await asyncio.start_unix_server(lambda r, w: _to_gateway("127.0.0.1", port, cap, r, w), str(path))
        try:
            held = [await asyncio.open_unix_connection(str(path)) for _ in range(3)]
            for reader, writer in held:  # each spliced through: its echo comes back
                writer.write(b"ping\n")
                assert await asyncio.wait_for(reader.readline(), 10) == b"ping\n"
            reader, writer = await asyncio.open_unix_connection(str(path))
            refused = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            for _, each in held:
                each.close()
            deadline = asyncio.get_running_loop().time() + 10
            while cap.open:  # the relay sees the held connections go
                assert asyncio.get_running_loop().time() < deadline, "the held connections never closed"
                await asyncio.sleep(0.01)
            reader, writer = await asyncio.open_unix_connection(str(path))
            writer.write(b"again\n")
            again = await asyncio.wait_for(reader.readline(), 10)
            writer.close()
        finally:
            listening.close()
            upstream.close()
            path.unlink(missing_ok=True)
        return refused, again

    refused, again = asyncio.run(go())
    assert refused == GATEWAY_REFUSAL and again == b"again\n"
    ((worker, name),) = _capped(run)  # the burst flagged once
    assert worker == 2 and name.startswith("orch-gw-test-")


def test_a_containers_pane_socket_answers_its_own_worker_alone(server: TmuxServer, run: RunFolder) -> None:
    """In a container each worker has a uid of its own: past its folder's permissions, the socket answers
    no peer but worker 1's uid and the run's own (SO_PEERCRED)."""
    (refused,) = _ask(server, run, [_line({"op": "screen"})], peers={os.geteuid() + 1})
    assert refused == {"ok": False, "error": "not worker 1's"}
    (answered,) = _ask(server, run, [_line({"op": "screen"})], peers={os.geteuid()})
    assert answered["ok"] is True


HALF_SENT_DEADLINE = 3.0  # the test's pane deadline: long past what answering takes, short for the suite


@asynccontextmanager
async def _panes(
    server: TmuxServer, run: RunFolder, peers: set[int] | None = None
) -> AsyncIterator[dict[int, tuple[_Pane, Path]]]:
    """Workers 1's and 2's pane sockets, served as the relay serves them (answering only `peers`, when given)."""
    served: dict[int, tuple[_Pane, Path]] = {}
    listening = []
    for n in (1, 2):
        path = Path(f"/tmp/orch-pane-test-{uuid.uuid4().hex[:8]}.sock")
        pane = _Pane(server, n, ConnectionCap(run, n, path, PANE_CONNECTIONS), peers, deadline=HALF_SENT_DEADLINE)
        listening.append(await asyncio.start_unix_server(pane.serve, path=str(path), limit=PANE_REQUEST))
        served[n] = (pane, path)
    try:
        yield served
    finally:
        for each in listening:
            each.close()
        for pane, path in served.values():
            pane.close()
            path.unlink(missing_ok=True)


async def _request(path: Path, request: bytes) -> dict[str, object]:
    reader, writer = await asyncio.open_unix_connection(str(path))
    try:
        writer.write(request)
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 30)
    finally:
        writer.close()
    return json.loads(line) if line else {}


async def _until(check: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + 10
    while not check():
        assert asyncio.get_running_loop().time() < deadline, f"never: {what}"
        await asyncio.sleep(0.01)


def test_a_worker_holding_its_pane_connections_half_sent_delays_no_other_worker(
    server: TmuxServer, run: RunFolder
) -> None:
    """Worker 1 holds every pane connection it may open, each a request begun and never finished: its next is
    refused (the cap), worker 2's screen, paste and Enter are answered while all four are still held (before the
    relay has let go of any), and the half-sent ones are then dropped unanswered at the deadline."""

    async def go() -> tuple[list[str], list[dict[str, object]], list[bytes]]:
        order: list[str] = []
        async with _panes(server, run) as panes:
            (one, one_path), (_, two_path) = panes[1], panes[2]
            held = await half_sent(one_path, PANE_CONNECTIONS)
            for task in held:
                task.add_done_callback(lambda _: order.append("dropped"))
            await _until(lambda: one.cap.open == PANE_CONNECTIONS, "the relay took worker 1's held connections")
            answers = [await _request(one_path, _line({"op": "screen"}))]
            for request in ({"op": "screen"}, {"op": "paste", "text": "from-two"}, {"op": "enter"}):
                answers.append(await _request(two_path, _line(request)))
                order.append("two")
            dropped = await asyncio.wait_for(asyncio.gather(*held), 30)
            await _until(lambda: one.cap.open == 0, "the relay let go of the dropped connections")
        return order, answers, dropped

    order, answers, dropped = asyncio.run(go())
    assert order == ["two"] * 3 + ["dropped"] * PANE_CONNECTIONS
    assert answers[0]["ok"] is False and "too many open pane connections" in str(answers[0]["error"])
    assert answers[1]["ok"] is True and answers[2:] == [{"ok": True}, {"ok": True}]
    assert dropped == [b""] * PANE_CONNECTIONS  # no answer: no half request was taken as a whole one
    assert "from-two" in server.capture(server.panes()[2].pane_id)
    assert "never fin" not in server.capture(server.panes()[1].pane_id)
    assert [worker for worker, _ in _capped(run)] == [1]  # worker 1's refused fifth


def test_a_worker_whose_pane_requests_keep_tmux_busy_delays_only_itself(server: TmuxServer, run: RunFolder) -> None:
    """Worker 1's pane thread is taken by a request that does not return (a gate stands for a tmux command
    that works hard): worker 1's next request waits behind it, worker 2's are answered meanwhile, on a thread of
    its own; once worker 1's returns, its waiting request is answered too."""

    async def go() -> tuple[list[str], dict[str, object]]:
        order: list[str] = []
        gate = threading.Event()
        async with _panes(server, run) as panes:
            (one, one_path), (_, two_path) = panes[1], panes[2]
            stuck = one.pool.submit(gate.wait, 30)
            waiting = asyncio.create_task(_request(one_path, _line({"op": "screen"})))
            waiting.add_done_callback(lambda _: order.append("one"))
            await _until(lambda: one.cap.open == 1, "the relay took worker 1's request")
            for request in ({"op": "screen"}, {"op": "paste", "text": "two-meanwhile"}):
                assert (await _request(two_path, _line(request)))["ok"] is True
                order.append("two")
            gate.set()
            answer = await asyncio.wait_for(waiting, 30)
            assert stuck.result(timeout=30) is True
        return order, answer

    order, answer = asyncio.run(go())
    assert order == ["two", "two", "one"] and answer["ok"] is True


def test_a_stranger_on_a_pane_socket_leaves_one_event_and_cannot_flood(
    server: TmuxServer, run: RunFolder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Connections to worker 1's pane socket from a uid that is not its worker's: each refused, none counted
    against worker 1's cap, and the lot logged as one event (`peer-refused`); once the interval has passed, the
    next is logged with the count of those it stands for. A burst past the cap, again and again: one event."""
    stranger = os.geteuid()  # the test's uid, not among the uids the socket answers

    async def go() -> list[dict[str, object]]:
        async with _panes(server, run, peers={stranger + 1}) as panes:
            pane, path = panes[1]
            answers = [await _request(path, _line({"op": "screen"})) for _ in range(3)]
            assert pane.cap.open == 0
            monkeypatch.setattr(refusals, "INTERVAL", 0.0)  # the interval passed
            answers.append(await _request(path, _line({"op": "screen"})))
        return answers

    answers = asyncio.run(go())
    assert answers == [{"ok": False, "error": "not worker 1's"}] * 4
    events = run_events(run, Event.PEER_REFUSED)
    assert [(e["data"]["uid"], e["data"]["pane"], e["data"]["refused"]) for e in events] == [
        (stranger, 1, 1),
        (stranger, 1, 3),
    ]
    assert events[0]["data"]["socket"].startswith("orch-pane-test-")


def test_bursts_past_the_pane_cap_again_and_again_leave_one_event(server: TmuxServer, run: RunFolder) -> None:
    async def go() -> None:
        async with _panes(server, run) as panes:
            pane, path = panes[1]
            for _ in range(3):  # fill the cap, be refused, let go: a new burst each time
                held = [await asyncio.open_unix_connection(str(path)) for _ in range(PANE_CONNECTIONS)]
                await _until(lambda: pane.cap.open == PANE_CONNECTIONS, "the relay took the held connections")
                assert (await _request(path, _line({"op": "screen"})))["ok"] is False
                for _, writer in held:
                    writer.close()
                await _until(lambda: pane.cap.open == 0, "the relay let go of the held connections")

    asyncio.run(go())
    ((worker, _),) = _capped(run)
    assert worker == 1


def _post_brief(run: RunFolder, n: int, text: str) -> str:
    """An offline brief: the scripted model has worker n post `text` to the bus, then touch its done flag
    (each step a model turn through its gateway socket, each post through its bus socket)."""
    steps = [{"bash": f"orch bus post {run.name} {text}"}, {"bash": f"touch {run.done(n)}"}, {"reply": "Posted."}]
    return "Post.\n\n```orch-script\n" + "\n".join(json.dumps(s) for s in steps) + "\n```\n"


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_dead_relay_is_started_again_by_a_worker_restart_and_serves_every_running_sandbox(tmp_path: Path) -> None:
    """A local strict fleet whose relay died (SIGKILL): `orch restart` of worker 1 starts it again (flagged),
    and both the restarted worker and worker 2, whose sandbox kept running, reach the gateway and post to
    the bus through it again: each sandbox has its folder of sockets bound, not the dead sockets."""
    work = tmp_path / "work"
    work.mkdir()
    assert orch("up", "rr", "-n", "2", "--agent", "scripted", "--offline", "--workdir", work, "--local").exit_code == 0
    run = RunFolder.for_name("rr")
    try:
        dead = relay._running(run)
        assert dead is not None
        os.kill(dead, signal.SIGKILL)
        wait_until(lambda: not relay.running(run), 10, "the relay to die")
        assert orch("restart", "rr", "1").exit_code == 0
        assert relay.running(run) and relay._running(run) != dead
        started = [json.loads(line) for line in run.events.read_text().splitlines()]
        assert [e["worker"] for e in started if e["event"] == Event.RELAY_STARTED] == [1]
        for n in (1, 2):
            brief = tmp_path / f"brief-{n}.md"
            brief.write_text(_post_brief(run, n, f"back-{n}"))
            assert orch("brief", "rr", str(n), brief).exit_code == 0
        waited = orch("wait", "rr", "--timeout", "60")
        assert waited.exit_code == 0, waited.output + run.log(2).read_text(errors="replace")[-2000:]
        bus_text = run.bus.read_text()
        assert "[W1] back-1" in bus_text and "[W2] back-2" in bus_text, bus_text
    finally:
        orch("kill", "rr")
    assert not sockets_dir(run.root).exists()


def test_the_relay_process_starts_without_psutil() -> None:
    """psutil (a tenth of the relay's imports) is for who starts and stops a relay (`ensure`, `stop`), not for
    the relay, which every local strict run starts."""
    probe = "import sys\nimport orch.backends.local.relay\nprint('psutil' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"

"""The host's end of a local strict run's sandboxes: `python -m orch.backends.local.relay RUN_DIR GATEWAY_URL`.

One process per run (started with the fleet, stopped with it), serving each worker's sockets in a folder of
that worker's (`wN/`) inside one of this uid's outside the run folder (orch.run.paths.sockets_dir). The
worker's folder, not each socket, is bound (read-only) into that worker's sandbox alone, at
orch.run.paths.SANDBOX_SOCKETS (orch.backends.local.bwrap): a relay started again (`ensure`, after the last one died)
serves new sockets in the same folders, which every running sandbox sees at once. The folders stay until
the fleet is stopped:

- `posts.sock` (OWN_BUS): the worker's bus; every post on it is stamped as worker N (orch.run.listeners's
  BusServer with its worker fixed): all local workers share one uid, so SO_PEERCRED could not tell them
  apart, but a worker can only reach the socket bound into its own sandbox;
- `gateway.sock`: its way to the model gateway, copied byte for byte to the gateway's loopback
  address. The worker still needs its own token there; the gateway's control API wants the control key,
  which stays in the controller's handle file, outside every sandbox;
- `hooks.sock`: its hooks over HTTP, for an agent that sends them so (Claude Code: orch.backends.local.httphooks),
  logged to its own hook log only, as the hook writer logs them; its portal listens for them on the
  sandbox's loopback;
- `egress.sock`, only when the run allows egress (`--egress allowlist`): the worker's HTTP CONNECT proxy to
  the names on the run's allowlist, and nothing else (orch.backends.local.egressproxy); capped as the gateway's;
- `pane.sock`: worker N's own pane, for an agent whose helper reads its screen and types into it
  (aider's watcher, Gemini CLI's approver; served only for such a worker): one JSON request line, one
  answer line. It can read that pane's screen, paste text into it and press Enter there, nothing else:
  the run's tmux server, which would let it type into every pane and run commands as the user, stays out
  of every sandbox.

In a run's container under strict isolation (each worker a uid of its own; `python -m orch.backends.local.relay
RUN_DIR --panes`) it serves the pane sockets alone: the workers reach the bus (SO_PEERCRED tells them apart)
and the gateway directly. Worker N's is `pane-N/pane.sock` in orch.run.paths.pane_sockets_dir, a folder
only the run's uid and worker N's group may enter (made by the container's init), and it answers no peer
but worker N's uid and the run's own.

A worker holds a capped number of connections open on each of its sockets (orch.backends.local.connections;
the bus's in BusServer): they all share this process's file descriptors. A refused connection (past the cap,
or on a pane socket from a uid not its worker's) is a controller event, at most one a minute per socket and
kind, so no worker can flood events.jsonl. Each worker's pane requests run on a thread of that worker's alone,
one request at a time, and a request that has not arrived whole within PANE_TIMEOUT is dropped: a worker that
keeps its pane connections busy (half-sent or slow requests) delays its own requests, no other worker's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import resource
import signal
import socket
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

from orch.agents.registry import get_adapter
from orch.backends.local import egressproxy, httphooks
from orch.backends.local.connections import ConnectionCap
from orch.backends.local.splice import splice
from orch.errors import OrchError, SandboxError
from orch.fleet.tmux import TmuxServer
from orch.run.bus import peer_uid
from orch.run.events import Event
from orch.run.files import atomic_write
from orch.run.folder import RunFolder
from orch.run.listeners import BusServer
from orch.run.paths import OWN_BUS, pane_sockets_dir, sockets_dir
from orch.run.records import RunInfo
from orch.run.uids import worker_of, worker_uid
from orch.waits import read_line

START_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0
WATCH_INTERVAL = 0.5  # how often the relay looks for the run's tmux server (a connect: cheap)
START_GRACE = 150.0  # a fleet whose tmux server never came up in this long is not coming (boot: 90 s)
PANE_REQUEST = 1 << 20  # a pane request's line: a first prompt to paste is at most this long
PANE_TIMEOUT = 5.0  # a pane client that sends no whole request line (or reads no answer) in this long is dropped
PANE_CONNECTIONS = 4  # open pane connections per worker: its watcher needs one at a time
GATEWAY_CONNECTIONS = 64  # open gateway connections per worker: an agent's pool holds a few
GATEWAY_REFUSAL = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def worker_sockets(run: RunFolder, n: int) -> Path:
    """Worker n's folder of sockets (a local strict run), bound into its sandbox at SANDBOX_SOCKETS."""
    return sockets_dir(run.root) / f"w{n}"


def bus_socket(run: RunFolder, n: int) -> Path:
    return worker_sockets(run, n) / OWN_BUS


def gateway_socket(run: RunFolder, n: int) -> Path:
    return worker_sockets(run, n) / "gateway.sock"


def egress_socket(run: RunFolder, n: int) -> Path:
    """Worker n's CONNECT proxy (served only when its run allows egress: orch.backends.local.egressproxy)."""
    return worker_sockets(run, n) / egressproxy.SOCKET


def hooks_socket(run: RunFolder, n: int) -> Path:
    """Worker n's hooks over HTTP (orch.backends.local.httphooks), for an agent that sends them so."""
    return worker_sockets(run, n) / "hooks.sock"


def pane_socket(run: RunFolder, n: int) -> Path:
    return worker_sockets(run, n) / "pane.sock"


def pane_workers(info: RunInfo) -> list[int]:
    """The workers whose agent reads and types into its own pane (`own_pane`): only they get a pane socket."""
    return [n for n in range(1, info.workers + 1) if get_adapter(info.agent_of(n)).facts.own_pane]


def own_pane_socket(run: RunFolder, n: int) -> Path:
    """Worker n's pane socket in a run's container under strict isolation (served with `--panes`)."""
    return pane_sockets_dir(run.root) / f"pane-{n}" / "pane.sock"


def _pid_file(run: RunFolder) -> Path:
    """The relay's pid, left when it exits (`_running` reads it with its command line: a pid is used again)."""
    return sockets_dir(run.root) / "relay.pid"


def _running(run: RunFolder, gateway_url: str | None = None) -> int | None:
    """The pid of the run's relay (to that gateway, when given), None if none runs."""
    try:
        pid = int(_pid_file(run).read_text())
    except (OSError, ValueError):
        return None
    from orch import procs  # here: psutil is for the relay's starters and stoppers, not the relay itself

    cmdline = procs.cmdline(pid)
    ours = "orch.backends.local.relay" in cmdline and str(run.root) in cmdline
    return pid if ours and (gateway_url is None or gateway_url in cmdline) else None


def running(run: RunFolder) -> bool:
    """Whether the run's relay runs."""
    return _running(run) is not None


def _ready(run: RunFolder, workers: int, panes_only: bool) -> bool:
    if panes_only:
        return all(own_pane_socket(run, n).exists() for n in range(1, workers + 1))
    kinds = (bus_socket, gateway_socket, hooks_socket) + (
        (egress_socket,) if egressproxy.allowlist_of(run.info()) is not None else ()
    )
    sockets = [each(run, n) for n in range(1, workers + 1) for each in kinds]
    return all(path.exists() for path in [*sockets, *(pane_socket(run, n) for n in pane_workers(run.info()))])


def ensure(run: RunFolder, workers: int, gateway_url: str | None) -> None:
    """The run's relay, started (detached: it outlives `orch up`) unless one serves it already. With no
    `gateway_url` (a run's container under strict isolation), its pane sockets alone."""
    folder = sockets_dir(run.root)
    folder.parent.mkdir(mode=0o700, exist_ok=True)
    if folder.parent.stat().st_uid != os.geteuid() or folder.parent.stat().st_mode & 0o077:
        raise SandboxError(f"{folder.parent} is not this user's alone: refusing to put the workers' sockets there")
    folder.mkdir(mode=0o700, exist_ok=True)
    if gateway_url is not None:
        for n in range(1, workers + 1):  # before any sandbox binds it; kept across relays
            worker_sockets(run, n).mkdir(mode=0o700, exist_ok=True)
    # A relay is kept only while its fleet's tmux server lives: after that server died (a relaunch), the old
    # relay is about to stop by itself (_until_fleet_gone), and kept, it would leave the new life's workers
    # with sockets nobody serves.
    fleet_alive = _listening(_tmux_socket(run.info().tmux_socket))
    if fleet_alive and _running(run, gateway_url) is not None and _ready(run, workers, gateway_url is None):
        return
    stop(run, keep_folders=True)  # running sandboxes have them bound: the new relay serves the same ones
    log = run.logs_dir / "relay.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    read_fd, write_fd = os.pipe()  # it says `ready` on this pipe once every socket listens: nothing is polled
    argv = [sys.executable, "-m", "orch.backends.local.relay", str(run.root), gateway_url or PANES_ONLY, str(write_fd)]
    try:
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, pass_fds=(write_fd,)
            )
    finally:
        os.close(write_fd)  # the relay holds the only write end: EOF means it is gone
    try:
        said = read_line(read_fd, START_TIMEOUT, "the sandboxes' relay to listen")
    finally:
        os.close(read_fd)
    if not said or not _ready(run, workers, gateway_url is None):
        raise SandboxError(f"the sandboxes' relay exited at start (exit {proc.wait()}): see {log}")


def stop(run: RunFolder, keep_folders: bool = False) -> None:
    """Stop the run's relay (if it runs) and remove its sockets; the workers' folders of sockets too, unless
    `keep_folders` (a relay about to start again: running sandboxes have them bound)."""
    pid = _running(run)
    if pid is not None:  # gone, not just its pid file: it removes that before it has exited
        from orch import signals  # here: psutil is for the relay's starters and stoppers, not the relay itself

        signals.terminate(pid, STOP_TIMEOUT, "the sandboxes' relay")
    folder = sockets_dir(run.root)
    for path in [*folder.glob("*"), *folder.glob("w*/*"), *pane_sockets_dir(run.root).glob("pane-*/pane.sock")]:
        if not path.is_dir():
            path.unlink(missing_ok=True)
    if not keep_folders:
        for path in [*folder.glob("w*"), folder]:
            with contextlib.suppress(OSError):
                path.rmdir()


async def _to_gateway(
    host: str, port: int, cap: ConnectionCap, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    if not cap.admit():
        writer.write(GATEWAY_REFUSAL)
        writer.close()
        return
    try:
        await splice(asyncio.open_connection(host, port), reader, writer)
    finally:
        cap.release()


class _Pane:
    """Worker n's own pane, and nothing else of the run's tmux server (`pane-N.sock`). `peers`: the uids it
    answers (a container's strict run: worker n's and the run's own), None: whoever reaches the socket.

    Its tmux commands run on a thread of its own, one at a time: a worker whose requests keep tmux busy
    waits for itself, while every other worker's run on theirs (a shared pool would let one worker's held
    requests take every thread). A request line must arrive whole, and its answer be read, within `deadline`."""

    def __init__(
        self,
        tmux: TmuxServer,
        n: int,
        cap: ConnectionCap,
        peers: set[int] | None = None,
        deadline: float = PANE_TIMEOUT,
    ) -> None:
        self.tmux, self.n, self.cap, self.peers, self.deadline = tmux, n, cap, peers, deadline
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"pane-{n}")

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            uid = peer_uid(writer.get_extra_info("socket")) if self.peers is not None else None
        except OSError:  # gone already
            writer.close()
            return
        stranger = self.peers is not None and uid not in self.peers
        if stranger:  # before the cap: a stranger's connections count against no worker's
            self.cap.refuse(Event.PEER_REFUSED, None if uid is None else worker_of(uid), {"uid": uid, "pane": self.n})
        admitted = not stranger and self.cap.admit()
        try:
            if stranger:
                answer: dict[str, object] = {"ok": False, "error": f"not worker {self.n}'s"}
            elif not admitted:
                answer = {"ok": False, "error": f"too many open pane connections (at most {self.cap.limit})"}
            else:
                answer = await self._answer(await asyncio.wait_for(reader.readline(), self.deadline))
            writer.write(json.dumps(answer).encode() + b"\n")
            await asyncio.wait_for(writer.drain(), self.deadline)
        except (OSError, TimeoutError, ValueError):  # gone, silent, or a line over the limit: dropped
            pass
        finally:
            if admitted:
                self.cap.release()
            writer.close()

    async def _answer(self, line: bytes) -> dict[str, object]:
        try:
            request = json.loads(line)
        except ValueError:
            request = None
        op = request.get("op") if isinstance(request, dict) else None
        text = request.get("text") if isinstance(request, dict) else None
        if op not in ("screen", "paste", "enter") or (op == "paste" and not isinstance(text, str)):
            return {"ok": False, "error": "unknown pane request: screen, paste (with text) or enter"}
        try:
            return await asyncio.get_running_loop().run_in_executor(self.pool, self._run, op, str(text))
        except OrchError as exc:
            return {"ok": False, "error": exc.one_line()}

    def _run(self, op: str, text: str) -> dict[str, object]:
        """One request's tmux commands, on this worker's thread."""
        pane = self.tmux.pane(self.n).pane_id
        if op == "screen":
            return {"ok": True, "screen": self.tmux.capture(pane)}
        if op == "paste":
            self.tmux.paste(pane, text)
        else:
            self.tmux.send_keys(pane, "Enter")
        return {"ok": True}


async def _egress(
    run: RunFolder, workers: int, lookup: egressproxy.Lookup, connect: egressproxy.Connect
) -> list[tuple[asyncio.Server, egressproxy.EgressProxy]]:
    """Each worker's CONNECT proxy, when the run allows egress (none otherwise: no socket, no network)."""
    allowlist = egressproxy.allowlist_of(run.info())
    if allowlist is None:
        return []
    served = []
    for n in range(1, workers + 1):
        path = egress_socket(run, n)
        path.unlink(missing_ok=True)
        cap = ConnectionCap(run, n, path, egressproxy.EGRESS_CONNECTIONS)
        proxy = egressproxy.EgressProxy(run, n, allowlist, cap, lookup, connect)
        server = await asyncio.start_unix_server(proxy.serve, path=str(path), limit=egressproxy.HEAD_LIMIT)
        served.append((server, proxy))
    return served


async def _serve(
    run: RunFolder,
    gateway_url: str | None,
    lookup: egressproxy.Lookup = egressproxy.system_lookup,
    connect: egressproxy.Connect = egressproxy.tcp_connect,
    ready_fd: int | None = None,
) -> None:
    """Serve the run's sockets until stopped; no `gateway_url`: the pane sockets of a container's strict run.
    `lookup`, `connect`: the egress proxies' (the host's own but in a test that serves its own names).
    `ready_fd`: a pipe to say `ready` on once every socket listens (`ensure` waits for it)."""
    workers = run.info().workers
    bus = BusServer(run, peercred=False)  # the controller serves bus.sock; here each worker's own socket
    servers = []
    proxies: list[tuple[asyncio.Server, egressproxy.EgressProxy]] = []
    if gateway_url is not None:
        for n in range(1, workers + 1):
            worker_sockets(run, n).mkdir(mode=0o700, exist_ok=True)
            bus.listen(bus_socket(run, n), worker=n)
        bus.start()
        parts = urlsplit(gateway_url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        for n in range(1, workers + 1):
            path = gateway_socket(run, n)
            path.unlink(missing_ok=True)
            cap = ConnectionCap(run, n, path, GATEWAY_CONNECTIONS)
            served = functools.partial(_to_gateway, host, port, cap)
            servers.append(await asyncio.start_unix_server(served, path=str(path)))
            hooks = hooks_socket(run, n)
            hooks.unlink(missing_ok=True)
            cap = ConnectionCap(run, n, hooks, httphooks.CONNECTIONS)
            writer = httphooks.HookServer(str(run.state(n)), str(run.permission_policy), cap)
            servers.append(await asyncio.start_unix_server(writer.serve, path=str(hooks), limit=httphooks.HEAD_LIMIT))
        proxies = await _egress(run, workers, lookup, connect)
        servers += [server for server, _ in proxies]
    tmux = TmuxServer(run.info().tmux_socket)
    panes = []
    for n in range(1, workers + 1) if gateway_url is None else pane_workers(run.info()):
        path = pane_socket(run, n) if gateway_url is not None else _own_pane_path(run, n)
        path.unlink(missing_ok=True)
        peers = None if gateway_url is not None else {worker_uid(n), os.geteuid()}
        pane = _Pane(tmux, n, ConnectionCap(run, n, path, PANE_CONNECTIONS), peers)
        panes.append(pane)
        servers.append(await asyncio.start_unix_server(pane.serve, path=str(path), limit=PANE_REQUEST))
        if gateway_url is None:
            path.chmod(0o666)  # its folder is the gate: only worker n (and this uid) may enter it
    atomic_write(_pid_file(run), str(os.getpid()), mode=0o600)
    if ready_fd is not None:
        with contextlib.suppress(OSError):  # its starter gone meanwhile: serve all the same
            os.write(ready_fd, b"ready\n")
        os.close(ready_fd)
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopped.set)
    watcher = asyncio.create_task(_until_fleet_gone(_tmux_socket(run.info().tmux_socket), stopped))
    await stopped.wait()
    watcher.cancel()
    for server in servers:
        server.close()
    for pane in panes:
        pane.close()
    for _, proxy in proxies:
        proxy.close()
    if gateway_url is not None:
        bus.stop()
    # Its pid file stays (`stop` removes it): while this process exits, it still names it, so `stop` waits for that.


def _own_pane_path(run: RunFolder, n: int) -> Path:
    """Worker n's pane socket in a container, once its folder is as the init made it: this uid's, group
    worker n's, entered by no one else (else refused: a socket there could be anyone's)."""
    path = own_pane_socket(run, n)
    st = path.parent.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_gid != worker_uid(n) or st.st_mode & 0o007:
        raise SandboxError(f"{path.parent} is not worker {n}'s pane folder (the run's uid's, group {worker_uid(n)})")
    return path


def _tmux_socket(name: str) -> Path:
    """Where tmux keeps the socket of `tmux -L name` (it removes it when its server exits)."""
    return Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.geteuid()}" / name


def _listening(path: Path) -> bool:
    """Whether a server listens on that socket (tmux leaves the file behind when it exits)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


async def _until_fleet_gone(tmux: Path, stopped: asyncio.Event) -> None:
    """Stop with the run's fleet: once its tmux server has gone (or never came up), nothing is left to
    serve, whoever tore it down (`orch kill` stops the relay itself; a test's or a crash's teardown does not)."""
    seen, started = False, time.monotonic()
    stale = tmux.exists() and not _listening(tmux)  # a dead server's file (a relaunch): not this life's
    while not stopped.is_set():
        alive = _listening(tmux)
        # tmux leaves its socket file behind when it exits: a new file means a server came (and maybe went).
        seen = seen or alive or (tmux.exists() and not stale)
        vanished = stale and not tmux.exists()  # the dead server's file removed: no server is coming
        if (seen and not alive) or vanished or (not seen and time.monotonic() - started > START_GRACE):
            stopped.set()
            return
        await asyncio.sleep(WATCH_INTERVAL)


PANES_ONLY = "--panes"


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or (len(argv) == 3 and not argv[2].isdigit()):
        print(
            f"usage: python -m orch.backends.local.relay RUN_DIR (GATEWAY_URL | {PANES_ONLY}) [READY_FD]",
            file=sys.stderr,
        )
        return 2
    # Every worker's sockets share this process's descriptors (each capped above): take all the system allows.
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    ready = int(argv[2]) if len(argv) == 3 else None
    asyncio.run(_serve(RunFolder(Path(argv[0])), None if argv[1] == PANES_ONLY else argv[1], ready_fd=ready))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

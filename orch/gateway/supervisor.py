"""The gateway's first process: binds the socket, starts the scripted upstream if asked, imports the server
while the upstream starts, forks the first server child (it binds the upstream's socket too, so the child knows
its URL before it serves: orch.gateway.child), writes the handle once both said they serve, then keeps a
server child serving on the inherited socket, forking another when it dies.

The supervisor owns the live worker tokens and jobs (the child reports each change over a pipe before
answering) and hands them to every new child, so a restart keeps the URL and every token. It never
touches the network itself. SIGTERM stops the child, the scripted upstream, then the supervisor.

It also keeps them, with its URL, in a state file beside its handle (`<handle>.tokens`, 0600, in the
gateway's own 0700 folder: never the run folder). A supervisor that died without a clean stop (SIGKILL,
OOM) leaves it behind; the next gateway started for the same run folder with that handle (the
controller's `orch.fleet.rungateway.ensure`) takes the tokens and jobs back and listens on the same address,
so the workers carry on with the base URL and token they have. A clean stop removes the file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import IO

from pydantic import Field, ValidationError
from tenacity import Retrying, retry_if_exception_type, retry_if_result, stop_after_delay, wait_exponential, wait_fixed

from orch.errors import OrchError, UsageError, WaitTimeoutError
from orch.gateway.child import NO_CA_FILE, ServerChild, die_with_parent, fork_server, import_server
from orch.gateway.eventlog import EventLog
from orch.gateway.modeldir import GatewayBoot, GatewayEventKind
from orch.gateway.pricing import load_pricing
from orch.gateway.process import state_path
from orch.gateway.wire import ChildStart, Report
from orch.run.files import atomic_write
from orch.run.folder import RunFolder
from orch.run.records import Strict
from orch.waits import read_line

log = logging.getLogger("orch.gateway")
UPSTREAM_START_TIMEOUT = 30.0
CHILD_START_TIMEOUT = 30.0
REBIND_TIMEOUT = 15.0
"""How long a resumed gateway waits for its old address (the dying child may still hold it)."""
LONG_LIFE = 10.0
"""A server child that lived longer than this (seconds) is restarted at once; one that died younger after a
pause that doubles from 0.1 s to at most 5 s while its successors keep dying young."""


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise UsageError(f"bad listen address {listen!r}", hint="use HOST:PORT, e.g. 127.0.0.1:0")
    return host.strip("[]") or "127.0.0.1", int(port)


def bind(listen: str) -> socket.socket:
    host, port = parse_listen(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {listen}: {exc.strerror}") from None
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def listen_of(url: str) -> str:
    """`http://127.0.0.1:8123` -> `127.0.0.1:8123` (the form `bind` takes)."""
    return url.split("://", 1)[-1].rstrip("/")


def restarts(pause: Callable[[float], None]) -> Retrying:
    """Runs a server child's life again while it returns True (it died young), pausing between (tenacity's
    exponential wait); a fresh one per streak, so a long life resets the pause."""
    return Retrying(retry=retry_if_result(bool), wait=wait_exponential(multiplier=0.1, max=5.0), sleep=pause)


class SavedState(Strict):
    run_dir: str
    url: str
    tokens: dict[int, str] = Field(default_factory=dict)
    agents: dict[int, str] = Field(default_factory=dict)
    jobs: dict[int, str] = Field(default_factory=dict)


class Supervisor:
    def __init__(self, boot: GatewayBoot, handle: Path, ready_fd: int | None = None) -> None:
        """`ready_fd`: a pipe to the starter, told `ready` once the handle is written (orch.gateway.process)."""
        self.boot, self.handle = boot, handle
        self.folder = RunFolder(Path(boot.run_dir))
        self.folder.model_dir.mkdir(parents=True, exist_ok=True)
        self.events = EventLog(self.folder.model_log)
        self.tokens: dict[int, str] = {}
        self.agents: dict[int, str] = {}
        self.jobs: dict[int, str] = {}
        self.stopping = False
        self._stopped = threading.Event()
        self.lives = 0
        self.child: ServerChild | None = None
        self.upstream_proc: subprocess.Popen[bytes] | None = None
        self._upstream_ready: int | None = None
        """The scripted model's ready pipe (its read end) until it said it serves, or died."""
        self._ready_fd = ready_fd
        self._handle_written = False
        self.url = ""
        self.state_file = state_path(handle)
        self.saved = self.load_state()
        if self.saved is not None:
            self.tokens, self.jobs = dict(self.saved.tokens), dict(self.saved.jobs)
            self.agents = dict(self.saved.agents)

    # --- the private state ----------------------------------------------------------------------
    def load_state(self) -> SavedState | None:
        """What a supervisor of this run folder left behind when it died; None if nothing (or another run's)."""
        try:
            saved = SavedState.model_validate_json(self.state_file.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValidationError) as exc:
            log.warning("ignoring the unreadable gateway state %s: %s", self.state_file, exc)
            return None
        return saved if saved.run_dir == self.boot.run_dir else None

    def save_state(self) -> None:
        state = SavedState(
            run_dir=self.boot.run_dir, url=self.url, tokens=self.tokens, agents=self.agents, jobs=self.jobs
        )
        atomic_write(self.state_file, state.model_dump_json() + "\n", mode=0o600)

    def bind(self) -> socket.socket:
        """The boot's address, or a resumed gateway's old one (waiting for its dying child to let go);
        a resumed gateway that cannot have it listens anew and says so (its workers' URLs are dead)."""
        if self.saved is None or parse_listen(self.boot.listen)[1] != 0:
            return bind(self.boot.listen)
        old = listen_of(self.saved.url)
        rebind = Retrying(
            retry=retry_if_exception_type(UsageError),
            wait=wait_fixed(0.1),
            stop=stop_after_delay(REBIND_TIMEOUT),
            reraise=True,
        )
        try:
            sock = rebind(bind, old)
        except UsageError as exc:
            self.events.emit(GatewayEventKind.STARTED, life=1, resumed=False, error=exc.message[:200])
            self.saved = None
            return bind(self.boot.listen)
        self.events.emit(GatewayEventKind.STARTED, life=1, resumed=True, tokens=len(self.tokens))
        return sock

    # --- the upstreams ----------------------------------------------------------------------------
    def upstream_urls(self) -> list[str]:
        """Each upstream's URL: an API's own, or the scripted model server's (started once, here)."""
        urls, scripted = [], ""
        for upstream in self.boot.upstreams:
            if upstream.kind == "api":
                if not upstream.url:
                    raise UsageError("upstream kind api needs a url", hint="e.g. https://api.anthropic.com")
                urls.append(upstream.url)
            else:
                scripted = scripted or self.start_scripted()
                urls.append(scripted)
        return urls

    def start_scripted(self) -> str:
        """Start the scripted model server on a loopback socket bound here and return its URL at once: the
        server child starts beside it (`scripted_ready` waits for its word before the handle is written)."""
        sock = bind("127.0.0.1:0")
        read_fd, write_fd = os.pipe()
        try:
            # By module name, not an import: the gateway layer does not import orch.offline.
            fds = ["--fd", str(sock.fileno()), "--ready-fd", str(write_fd)]
            self.upstream_proc = subprocess.Popen(
                [sys.executable, "-m", "orch.offline.modelserver", *fds],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env={**os.environ, **NO_CA_FILE},  # it only serves
                pass_fds=(sock.fileno(), write_fd),
                preexec_fn=die_with_parent,
            )
            url = url_of(sock)
        finally:
            os.close(write_fd)  # so the read end sees EOF exactly when the model server is gone
            # Only the model server holds it now: if it dies, a connection is refused instead of left waiting.
            sock.close()
        self._upstream_ready = read_fd
        return url

    def scripted_ready(self) -> None:
        """Wait for the scripted model server's ready line, if it was started and has not said it yet (called
        when the server child is ready: the two started together, so it has mostly been said by then)."""
        ready, self._upstream_ready = self._upstream_ready, None
        if ready is None:
            return
        try:
            line = read_line(ready, UPSTREAM_START_TIMEOUT, "the scripted model server to start")
        finally:
            os.close(ready)
        if not line:
            assert self.upstream_proc is not None
            raise OrchError(f"the scripted model server did not start (exit {self.upstream_proc.wait()})")

    # --- the server child -----------------------------------------------------------------------
    def spawn(self, sock: socket.socket, upstream_urls: list[str], life: int) -> IO[bytes]:
        read_fd, write_fd = os.pipe()
        held = {"tokens": self.tokens, "agents": self.agents, "jobs": self.jobs}
        start = ChildStart(boot=self.boot, upstream_urls=upstream_urls, life=life, **held)
        # Not the child's: the starter's ready pipe, the scripted model's, the reports' read end.
        mine = [fd for fd in (self._ready_fd, self._upstream_ready, read_fd) if fd is not None]
        try:
            self.child = fork_server(start, sock, write_fd, close=mine)
        finally:
            os.close(write_fd)  # so the read end sees EOF exactly when the child is gone
        return os.fdopen(read_fd, "rb")

    def import_server(self) -> None:
        """The server child's code, imported once here before the first fork: with no `api` upstream
        (offline, replay) the gateway opens no TLS connection, so aiohttp is imported without a CA bundle."""
        import_server(live=any(upstream.kind == "api" for upstream in self.boot.upstreams))

    def follow(self, reports: IO[bytes]) -> bool:
        """Read the child's reports until it is gone; True if it had said it was ready."""
        ready = False
        for line in reports:
            try:
                report = Report.model_validate_json(line)
            except ValidationError:
                continue
            if report.ready:
                ready = True
                if not self._handle_written:
                    self.scripted_ready()
                    self.write_handle()
                    self._handle_written = True
            if report.worker is not None and report.token is not None:
                self.tokens[report.worker] = report.token
                if report.agent is None:
                    self.agents.pop(report.worker, None)
                else:
                    self.agents[report.worker] = report.agent
                self.save_state()
            if report.worker is not None and report.job_set:
                if report.job is None:
                    self.jobs.pop(report.worker, None)
                else:
                    self.jobs[report.worker] = report.job
                self.save_state()
        reports.close()
        return ready

    def write_handle(self) -> None:
        self.handle.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.handle, json.dumps({"url": self.url, "pid": os.getpid()}) + "\n", mode=0o600)
        if self._ready_fd is not None:
            with contextlib.suppress(OSError), open(self._ready_fd, "wb") as starter:  # a starter gone: fine
                starter.write(b"ready\n")
            self._ready_fd = None

    def check(self) -> None:
        """What would make every server child fail at start, as one line now instead."""
        load_pricing(self.boot.pricing)
        if self.boot.replay:
            from orch.gateway.recording.replay import (
                Replayer,  # here: a live or scripted gateway starts its children sooner
            )

            Replayer(Path(self.boot.replay), self.boot.run_dir, self.boot.workdir)

    def run(self) -> int:
        self.check()
        sock = self.bind()
        self.url = url_of(sock)
        self.save_state()
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        try:
            upstream_urls = self.upstream_urls()  # the scripted model imports its code while this one does
            self.import_server()
            while not self.stop_requested():
                restarts(self._pause)(self.life, sock, upstream_urls)
        finally:
            self.shutdown()
            sock.close()
        return 0

    def life(self, sock: socket.socket, upstream_urls: list[str]) -> bool:
        """One server child from start to exit; True if it died young (`restarts` pauses before the next)."""
        if self.stop_requested():
            return False
        self.lives += 1
        life = self.lives
        born = time.monotonic()
        ready = self.follow(self.spawn(sock, upstream_urls, life))
        assert self.child is not None
        code = self.child.wait()
        if self.stop_requested():
            return False
        if life == 1 and not ready:
            raise OrchError(f"the gateway's server did not start (exit {code}); see the log above")
        self.events.emit(GatewayEventKind.STARTED, life=life + 1, restart=f"server child exited with {code}")
        return time.monotonic() - born <= LONG_LIFE

    def _pause(self, seconds: float) -> None:
        self._stopped.wait(seconds)

    def stop_requested(self) -> bool:
        return self.stopping  # a method: the signal handler sets it behind mypy's back

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        self._stopped.set()  # ends a pause between restarts at once
        if self.child is not None:
            self.child.terminate()  # never reaped here: the loop's wait does

    def shutdown(self) -> None:
        if self.child is not None and self.child.poll() is None:
            self.child.terminate()
            try:
                self.child.wait(10)
            except WaitTimeoutError:
                self.child.kill()
                self.child.wait()
        if self.upstream_proc is not None and self.upstream_proc.poll() is None:
            self.upstream_proc.terminate()
            try:
                self.upstream_proc.wait(10)
            except subprocess.TimeoutExpired:
                self.upstream_proc.kill()
                self.upstream_proc.wait()
        if self.stop_requested():  # a clean stop: nothing to resume (a failed start keeps what it had)
            self.state_file.unlink(missing_ok=True)

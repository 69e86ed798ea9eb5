"""The benchmark's private world: its own ORCH_HOME, TMUX_TMPDIR and model server; fleets it always kills.

Nothing here touches another user's runs: every run lives under a fresh temp folder, every tmux server
on a socket in a fresh TMUX_TMPDIR, and every request goes to a model server on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench import procs
from bench.recorder import Request, read_log
from orch import __version__
from orch.agents.claude import CREDENTIAL_ENV
from orch.agents.claude import FACTS as CLAUDE
from orch.agents.gemini import FACTS as GEMINI
from orch.agents.registry import get_adapter
from orch.backends.local.backend import LocalSettings
from orch.backends.local.sandbox import LocalSandbox
from orch.backends.registry import confinement_of
from orch.contracts import UpRequest
from orch.errors import OrchError, UsageError
from orch.fleet import control, launch
from orch.fleet.tmux import check_tmux
from orch.procs import alive
from orch.run.folder import RunFolder
from orch.run.records import LocalRunInfo, RunInfo
from orch.waits import wait_for_paths, wait_until

REPO = Path(__file__).resolve().parent.parent
OFFLINE_KEY = "sk-ant-orch-bench-000000000000000000000000"
BOOT_TIMEOUT = 180.0
EXIT_TIMEOUT = 20.0


class BenchError(Exception):
    """A measurement could not be taken (a helper died, a deadline passed)."""


def python_env() -> dict[str, str]:
    """The environment for helper processes: ours, with the repo importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def helper(*args: str) -> list[str]:
    """argv of a benchmark helper process (`python -m bench.probes ...`)."""
    return [sys.executable, "-m", "bench.probes", *args]


def orch_cli(*args: str) -> list[str]:
    """argv of the real `orch` command of this interpreter (the console script when installed)."""
    script = Path(sys.executable).parent / "orch"
    if script.is_file():
        return [str(script), *args]
    return [sys.executable, "-c", "from orch.cli.main import main; main()", *args]


def popen(argv: list[str], stdin: bool = True) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=python_env(),
        cwd=REPO,
    )


def stop(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """End a helper we started: close its stdin, SIGTERM, then SIGKILL; always reaped."""
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            if proc.stdin:
                proc.stdin.close()
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


class Lines:
    """Read a helper's stdout line by line with a deadline per line (never blocks forever)."""

    def __init__(self, proc: subprocess.Popen[bytes], what: str) -> None:
        assert proc.stdout is not None
        self.proc = proc
        self.fd = proc.stdout.fileno()
        self.what = what
        self.buffer = b""

    def next(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BenchError(f"{self.what}: no output within {timeout:g}s")
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(self.fd, 65536)
            if not chunk:
                err = self.proc.stderr.read().decode(errors="replace")[-400:] if self.proc.stderr else ""
                raise BenchError(f"{self.what} exited ({self.proc.poll()}): {err.strip()}")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode()


def send(proc: subprocess.Popen[bytes], line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line.encode() + b"\n")
    proc.stdin.flush()


def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """Block until `proc` exits (pidfd: woken at once, unlike Popen.wait's polling); its exit code."""
    fd = os.pidfd_open(proc.pid)
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
    finally:
        os.close(fd)
    if not ready:
        raise BenchError(f"process {proc.pid} did not exit within {timeout:g}s")
    return proc.wait(timeout)


def wait_watching(pid: int, inode: int, timeout: float = 60.0) -> None:
    """Until process `pid` holds an inotify watch on `inode` (it is armed and blocked on it)."""
    wait_until(lambda: inode in procs.inotify_watches(pid), timeout, f"process {pid} to watch inode", interval=0.001)


@dataclass
class Fleet:
    run: RunFolder
    info: RunInfo
    up_seconds: float

    def panes(self) -> dict[int, int]:
        """worker -> pid of the process the pane runs (the supervising shell, root of the agent tree)."""
        out = {}
        for n, pane in launch.server_for(self.info).panes().items():
            if pane.pid is not None:
                out[n] = pane.pid
        return out

    def tmux_pid(self) -> int | None:
        """pid of the run's tmux server (asked of tmux itself, on our private socket)."""
        argv = ["tmux", "-L", self.info.tmux_socket, "-f", "/dev/null", "list-sessions", "-F", "#{pid}"]
        out = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=10)
        text = out.stdout.strip().partition("\n")[0]
        return int(text) if out.returncode == 0 and text.isdigit() else None

    def sessions(self) -> dict[str, int]:
        """Claude Code session id -> worker, from the SessionStart hooks."""
        out = {}
        for n in range(1, self.info.workers + 1):
            for event in self.run.hook_events(n):
                if event.session_id:
                    out[event.session_id] = n
        return out


class BenchEnv:
    """`with BenchEnv() as env:` private ORCH_HOME/TMUX_TMPDIR, a recording model server, fleet cleanup."""

    def __init__(self, keep: bool = False) -> None:
        self.keep = keep
        self.root = Path()
        self._saved: dict[str, str] = {}
        self._counter = 0
        self._model: subprocess.Popen[bytes] | None = None
        self.model_url = ""
        self.live: list[Fleet] = []

    # -- setup / teardown -------------------------------------------------------------------------
    def __enter__(self) -> BenchEnv:
        self._saved = dict(os.environ)
        self.root = Path(tempfile.mkdtemp(prefix="ob-", dir="/tmp"))  # short: tmux socket paths are limited
        os.environ["ORCH_HOME"] = str(self.root / "home")
        os.environ["TMUX_TMPDIR"] = str(self.root)
        os.environ["SHELL"] = "/bin/sh"
        gemini = ("GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GEMINI_CLI_HOME")
        for var in (*CREDENTIAL_ENV, *gemini, "ANTHROPIC_BASE_URL", "CLAUDE_CONFIG_DIR", "TMUX", "TMUX_PANE"):
            os.environ.pop(var, None)
        if "ORCH_CLAUDE_BIN" not in os.environ and CLAUDE.cache_bin.exists():
            os.environ["ORCH_CLAUDE_BIN"] = str(CLAUDE.cache_bin)
        if "ORCH_GEMINI_BIN" not in os.environ and GEMINI.cache_bin.exists():
            os.environ["ORCH_GEMINI_BIN"] = str(GEMINI.cache_bin)
        return self

    def __exit__(self, *exc: object) -> None:
        for live in list(self.live):
            with contextlib.suppress(Exception):
                self.kill(live)
        if self._model is not None:
            stop(self._model)
        for sock_dir in self.root.glob("tmux-*"):  # anything a crash left behind, on our sockets only
            for sock in sock_dir.iterdir():
                subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True, check=False)
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)
        os.environ.clear()
        os.environ.update(self._saved)

    # -- prerequisites ----------------------------------------------------------------------------
    def claude_missing(self, agent: str = "claude") -> str | None:
        """Why benchmarks with real workers of `agent` cannot run here, or None."""
        try:
            check_tmux()
            get_adapter(agent).binary()
        except UsageError as exc:
            return exc.one_line()
        return None

    # -- the model server -------------------------------------------------------------------------
    def model(self) -> str:
        """Start the recording model server once; agents reach it through ANTHROPIC_BASE_URL (Gemini CLI:
        GOOGLE_GEMINI_BASE_URL), by way of the run's gateway."""
        if self._model is None:
            url_file, log_file = self.root / "model.url", self.root / "model.log"
            self._model = popen(
                [sys.executable, "-m", "bench.recorder", "--url-file", str(url_file), "--log-file", str(log_file)],
                stdin=False,
            )
            if wait_for_paths([url_file], 20.0) or self._model.poll() is not None:
                raise BenchError("the recording model server did not start")
            self.model_url = url_file.read_text().strip()
            os.environ["ANTHROPIC_BASE_URL"] = self.model_url
            os.environ["ANTHROPIC_API_KEY"] = OFFLINE_KEY
            os.environ["GOOGLE_GEMINI_BASE_URL"] = self.model_url
            os.environ["GEMINI_API_KEY"] = OFFLINE_KEY
        return self.model_url

    @property
    def model_pid(self) -> int | None:
        return self._model.pid if self._model else None

    def requests(self) -> list[Request]:
        return read_log(self.root / "model.log")

    # -- runs -------------------------------------------------------------------------------------
    def name(self, prefix: str) -> str:
        """A fresh run name: never reused, so a late hook of a killed run cannot land in a new one."""
        self._counter += 1
        return f"{prefix}-{self._counter}"

    def workdir(self, name: str) -> Path:
        path = self.root / "work" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def up(self, prefix: str, workers: int, agent: str = "claude") -> Fleet:
        """`orch up --local` with real workers of `agent` on the recording model server; timed."""
        self.model()
        name = self.name(prefix)
        req = UpRequest(name=name, workers=workers, agent=agent, workdir=self.workdir(name))
        start = time.monotonic()
        info = LocalSandbox(LocalSettings(boot_timeout=BOOT_TIMEOUT)).up(req)
        live = Fleet(RunFolder.for_name(name), info, time.monotonic() - start)
        self.live.append(live)
        return live

    def kill(self, live: Fleet) -> None:
        """`control.kill`, then wait (bounded) until every agent process of the run has exited, so the next
        measurement does not share the CPU with a dying fleet."""
        try:
            members = [p for root in live.panes().values() for p in procs.tree(root)]
        except OrchError:
            members = []
        try:
            control.kill(live.run, confinement_of(live.run.info()))
        finally:
            if live in self.live:
                self.live.remove(live)
            try:
                wait_until(
                    lambda: not any(alive(p) for p in members),  # a zombie has exited
                    EXIT_TIMEOUT,
                    "the killed fleet's processes to exit",
                    interval=0.05,
                )
            except OrchError:
                for pid in members:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)

    @contextlib.contextmanager
    def fleet(self, prefix: str, workers: int) -> Iterator[Fleet]:
        live = self.up(prefix, workers)
        try:
            yield live
        finally:
            self.kill(live)

    def file_run(self, prefix: str, workers: int = 1) -> RunFolder:
        """A run folder with no tmux and no agents: enough for file-only operations (wait, bus)."""
        name = self.name(prefix)
        run = RunFolder.for_name(name)
        run.create(
            LocalRunInfo(
                name=name,
                agent="claude",
                workers=workers,
                workdir=str(self.workdir(name)),
                permission_mode="acceptEdits",
                tmux_socket=launch.socket_name(name),
                orch_version=__version__,
            )
        )
        return run

"""A private tmux server per run: panes by id, tagged by worker number, bracketed paste.

Never the user's default server: every command runs as `tmux -L SOCKET -f /dev/null`, so neither the
user's sessions nor their ~/.tmux.conf are involved. `TMUX_TMPDIR` is honoured (tests set it).

libtmux holds the server; its command API and objects make the calls, one client call each. The status loop
reads every pane in one `list-panes` with formats (libtmux's `server.panes` would call `show-options` per pane
for its worker tag; its listings also take a failed call for an empty list). Calls that need the client's
process environment (the server's start: how secrets reach the panes; a new pane, which gets the client's PATH)
or stdin (a buffer's text) go to tmux directly. Every call waits at most its deadline (orch.fleet.tmuxclient): a
server that does not answer is NoAnswerError, never taken for one that is gone.

Agents are launched with their argv passed to tmux as separate arguments: tmux then execs them
directly (no shell, no quoting, no line-length limit). Secrets reach panes through the tmux server's
own process environment, given to `start`; per-pane values go through `-e` and must not be secret.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from orch import prereqs
from orch.contracts import LaunchSpec
from orch.errors import NoAnswerError, NotFoundError, SandboxError, UsageError, WaitTimeoutError
from orch.run.terminal import HISTORY_LIMIT, WINDOW_SIZE
from orch.waits import wait_until

if TYPE_CHECKING:
    from libtmux import Pane

    from orch.fleet.tmuxclient import Client, Server

log = logging.getLogger(__name__)

PANES_PER_WINDOW = 6
WORKER_OPTION = "@orch_worker"
EXIT_GRACE = 5.0  # seconds for a server that has destroyed its sessions (kill-server) to exit
_SERVER_OPTIONS = (
    ("-s", "exit-empty", "off"), ("-s", "escape-time", "10"), ("-g", "history-limit", str(HISTORY_LIMIT)),
    ("-g", "base-index", "1"), ("-g", "default-size", "{}x{}".format(*WINDOW_SIZE)), ("-wg", "remain-on-exit", "on"),
    ("-wg", "pane-border-status", "top"),
    ("-wg", "pane-border-format", " W#{" + WORKER_OPTION + "} #{pane_current_command} "),
)  # fmt: skip
# list-panes: the server's pid (to send it SIGCHLD), then each pane's fields, as _list_panes reads them.
_PANE_FIELDS = ("pid", "pane_id", WORKER_OPTION, "window_index", "pane_dead", "pane_dead_status", "pane_dead_signal",
                "pane_pid", "pane_current_command")  # fmt: skip
_PANE_FORMAT = "\t".join("#{" + field + "}" for field in _PANE_FIELDS)


def check_tmux() -> str:
    """Return the tmux version ("3.3a"); UsageError if tmux is missing or older than we support."""
    return prereqs.tmux_version()


@dataclass(frozen=True)
class PaneInfo:
    pane_id: str
    worker: int
    window: int
    """tmux window index (1-based: window 1 holds workers 1-6, window 2 workers 7-12, ...)."""
    dead: bool
    dead_status: int | None
    dead_signal: int | None
    pid: int | None
    """None once the pane is dead, so nobody signals a recycled pid."""
    current_command: str


def window_name(worker: int) -> str:
    """`w1-6`, `w7-12`, ...: the window that holds `worker`."""
    first = (worker - 1) // PANES_PER_WINDOW * PANES_PER_WINDOW + 1
    return f"w{first}-{first + PANES_PER_WINDOW - 1}"


def _unreaped(pane: PaneInfo) -> bool:
    return pane.dead and pane.dead_status is None and pane.dead_signal is None


def _int_or_none(text: str) -> int | None:
    return int(text) if text.strip().lstrip("-").isdigit() else None


def _one_line(text: str) -> str:
    return " ".join(text.split()) or "no error message"


class TmuxServer:
    """One run's tmux server, addressed by socket name (`tmux -L NAME -f /dev/null`): libtmux's Server, with
    orch's launches and its one-call view of the panes."""

    def __init__(self, socket_name: str, timeout: float | None = None) -> None:
        self.socket_name = socket_name
        self.timeout = timeout
        """Seconds a tmux command may take (None: orch.fleet.tmuxclient.CALL_TIMEOUT)."""
        self._session: str | None = None

    def __repr__(self) -> str:
        return f"TmuxServer({self.socket_name!r})"

    # -- running tmux ------------------------------------------------------------------------------

    @cached_property
    def client(self) -> Client:
        """How to reach this server, each command bounded. Imported here: few `orch` commands talk to tmux."""
        from orch.fleet import tmuxclient

        return tmuxclient.Client.find(self.socket_name, self.timeout)

    @cached_property
    def server(self) -> Server:
        """libtmux's handle on this server (no call yet), its commands made through `client`."""
        from orch.fleet.tmuxclient import Server

        return Server(self.client)

    def _pane(self, pane_id: str) -> Pane:
        """libtmux's Pane for `pane_id`, made without the call `Pane.from_pane_id` spends reading its fields."""
        from libtmux import Pane

        return Pane(server=self.server, pane_id=pane_id)

    @contextlib.contextmanager
    def _errors(self, command: str) -> Iterator[None]:
        """libtmux's errors (tmux's stderr, a tmux that cannot run) as SandboxError, naming the command."""
        from libtmux.exc import LibTmuxException

        try:
            yield
        except (OSError, LibTmuxException) as exc:
            raise self._failed(command, str(exc)) from None

    def _failed(self, command: str, error: str) -> SandboxError:
        return SandboxError(f"tmux {command} failed on server {self.socket_name}: {_one_line(error)}")

    def _cmd(self, *args: str, target: str | None = None) -> list[str]:
        """One tmux command through libtmux's command API: its stdout lines, without the trailing empty ones, or
        SandboxError with tmux's stderr."""
        with self._errors(args[0]):
            proc = self.server.cmd(*args, target=target)
        if proc.returncode != 0:
            raise self._failed(args[0], " ".join(proc.stderr))
        return proc.stdout

    def _direct(self, args: list[str], env: Mapping[str, str], stdin: bytes = b"") -> str:
        """One tmux command with the client's process environment `env` and `stdin`, which libtmux's calls do not
        take: its stdout, or SandboxError with tmux's stderr."""
        try:
            proc = self.client.run(args, env, stdin)
        except OSError as exc:
            raise self._failed(args[0], str(exc)) from None
        if proc.returncode != 0:
            raise self._failed(args[0], proc.stderr.decode(errors="replace"))
        return proc.stdout.decode(errors="replace")

    def run_shell(self, command: str) -> None:
        """Run a shell command as the tmux server's own child and wait for it (under strict isolation the
        server alone may become a worker). `#` would start a tmux format: callers quote no such thing."""
        self._cmd("run-shell", command.replace("#", "##"))

    def _session_name(self) -> str:
        if self._session is None:
            sessions = self._cmd("list-sessions", "-F", "#{session_name}")
            if not sessions:
                raise SandboxError(f"tmux server {self.socket_name} has no session")
            self._session = sessions[0]
        return self._session

    # -- lifecycle ---------------------------------------------------------------------------------

    def alive(self) -> bool:
        """Whether the server runs; NoAnswerError if it does not answer (libtmux's is_alive says False then)."""
        try:
            with self._errors("list-sessions"):
                return self.server.cmd("list-sessions").returncode == 0
        except NoAnswerError:
            raise
        except (UsageError, SandboxError):  # no tmux, or none that runs: no server either
            return False

    def start(self, session: str, first: LaunchSpec, worker: int, env: Mapping[str, str]) -> str:
        """Start the server with `env` as its process environment and `first` in its first pane. `env` is how
        secrets reach the panes: the server copies its environment into every pane, and nothing of it appears
        on a command line. If anything fails, the server is killed again."""
        if self.alive():
            raise SandboxError(f"tmux server {self.socket_name} is already running", hint="kill it first")
        # Not the user's tmux we may be started from; and the client that forks the server picks the socket
        # directory: it must match our later calls, which run with our own environment.
        server_env = {k: v for k, v in env.items() if k not in ("TMUX", "TMUX_PANE", "TMUX_TMPDIR")}
        if "TMUX_TMPDIR" in os.environ:
            server_env["TMUX_TMPDIR"] = os.environ["TMUX_TMPDIR"]
        width, height = WINDOW_SIZE
        # First call: the server alone. Its command line stays visible in `ps` for its whole life,
        # so it gets no agent argv; exit-empty off keeps it up until the session exists.
        options = [["start-server"], *(["set-option", *option] for option in _SERVER_OPTIONS)]
        new_session = ["new-session", "-d", "-s", session, "-n", window_name(worker), "-P", "-F", "#{pane_id}"]
        new_session += ["-x", str(width), "-y", str(height), *self.client.spawn_args(first)]
        session_commands = [
            new_session,
            # Right after new-session, set-option -p targets the new pane: tagged before anyone looks.
            ["set-option", "-p", WORKER_OPTION, str(worker)],
            # new-session -e writes the *session* environment; keep per-worker values out of later panes.
            *(["set-environment", "-t", f"={session}", "-u", key] for key in first.env),
            ["set-option", "-s", "exit-empty", "on"],
        ]
        try:
            self._direct(self.client.chain(options), server_env)
            out = self._direct(self.client.chain(session_commands), server_env)
            pane_id = out.strip().partition("\n")[0]
            if not pane_id.startswith("%"):
                raise SandboxError(f"tmux new-session printed no pane id on server {self.socket_name}: {out!r}")
        except BaseException:
            with contextlib.suppress(SandboxError):
                self.kill()  # leave nothing behind; the first error is the one to report
            raise
        self._session = session
        log.debug("tmux server started", extra={"socket": self.socket_name, "pane": pane_id})
        return pane_id

    def _spawn(self, *args: str) -> list[str]:
        """Run a command that makes or respawns a pane. tmux (3.2+) gives such a pane the PATH of the client
        that asked for it, even over `-e PATH=`: ask with the server's PATH, or workers 2..N would not
        find what the first one finds (`orch` itself, when orch was started as .venv/bin/orch)."""
        env = dict(os.environ)
        with self._errors("show-environment"):
            path = self.server.getenv("PATH")
        if isinstance(path, str):
            env["PATH"] = path
        return self._direct(list(args), env).splitlines()

    def add_pane(self, spec: LaunchSpec, worker: int) -> str:
        """Launch `spec` in a new pane tagged `worker`: split its window, or open the window."""
        if worker in self.panes():
            raise UsageError(f"worker {worker} already has a pane on server {self.socket_name}")
        session = self._session_name()
        name = window_name(worker)
        listed = self._cmd("list-windows", "-t", f"={session}", "-F", "#{window_id}\t#{window_name}")
        windows = [window for window, _, named in (line.partition("\t") for line in listed) if named == name]
        spawn = self.client.spawn_args(spec)
        if not windows:
            out = self._spawn("new-window", "-d", "-t", f"={session}:", "-n", name, "-P", "-F", "#{pane_id}", *spawn)
        else:
            out = self._spawn("split-window", "-d", "-t", windows[0], "-P", "-F", "#{pane_id}", *spawn)
            self._cmd("select-layout", "-t", windows[0], "tiled")
        pane_id = out[0]
        with self._errors("set-option"):
            self._pane(pane_id).set_option(WORKER_OPTION, str(worker))
        return pane_id

    def respawn(self, pane_id: str, spec: LaunchSpec) -> None:
        """Restart the pane's process (dead or not); the pane keeps its id, tag and transcript pipe."""
        self._spawn("respawn-pane", "-k", "-t", pane_id, *self.client.spawn_args(spec))

    def kill(self) -> None:
        """Stop the server and every pane in it; fine if it is already gone. Returns once it is gone,
        so a new server can start on the same socket right away."""
        try:
            with self._errors("kill-server"):
                err = " ".join(self.server.cmd("kill-server").stderr)
        except NoAnswerError:
            raise
        except (UsageError, SandboxError):  # no tmux: no server either
            return
        self._session = None
        try:
            wait_until(lambda: not self.alive(), EXIT_GRACE, f"tmux server {self.socket_name} to exit", interval=0.02)
        except WaitTimeoutError:
            raise SandboxError(f"tmux kill-server failed on server {self.socket_name}: {_one_line(err)}") from None

    def attach_argv(self, read_only: bool, pane_id: str | None = None) -> list[str]:
        """argv to exec for `orch attach` (at `pane_id`: its window and pane selected). The caller should drop
        $TMUX from the env when nesting."""
        target = ["-t", pane_id] if pane_id else []
        return self.client.argv("attach-session", *(["-r"] if read_only else []), *target)

    def client_ttys(self) -> list[str]:
        """The terminals attached to this server (`orch attach`): where a run's notifier rings. None attached,
        or no server: [] (one that does not answer: NoAnswerError)."""
        try:
            with self._errors("list-clients"):
                proc = self.server.cmd("list-clients", "-F", "#{client_tty}")
        except NoAnswerError:
            raise
        except (UsageError, SandboxError):  # no tmux: no server either
            return []
        return [line for line in proc.stdout if line.startswith("/dev/")] if proc.returncode == 0 else []

    # -- panes -------------------------------------------------------------------------------------

    def panes_if_running(self) -> dict[int, PaneInfo] | None:
        """panes(), or None when the server is not running: one tmux call while it runs (a watcher's
        every step), a second only to tell a dead server from a failing command.

        A server that lists no panes is usually exiting: `kill-server` destroys every session first
        and still answers clients until it is gone. So an empty list waits briefly for the exit."""
        try:
            panes = self.panes()
        except NoAnswerError:
            raise
        except SandboxError:
            if self.alive():
                raise
            return None
        if panes:
            return panes
        try:
            wait_until(lambda: not self.alive(), EXIT_GRACE, f"paneless tmux server {self.socket_name} to exit")
        except WaitTimeoutError:
            return panes
        return None

    def panes(self) -> dict[int, PaneInfo]:
        """Worker number -> pane, from one list-panes call. Panes without a worker tag are skipped.

        tmux marks a pane dead when its pty closes and learns the exit status when it reaps the
        process on SIGCHLD. tmux 3.3a sometimes misses that SIGCHLD (seen on Linux 6.x: the agent
        stays a zombie, `pane_dead_status` stays empty for good). Then we send the server a SIGCHLD
        ourselves, which makes it reap, and read again for up to a second.
        """
        panes, server_pid = self._list_panes()
        if any(_unreaped(p) for p in panes.values()):
            with contextlib.suppress(OSError):  # not our pid namespace, or already gone
                os.kill(server_pid, signal.SIGCHLD)

            def reaped() -> dict[int, PaneInfo] | None:
                again = self._list_panes()[0]
                return None if any(_unreaped(p) for p in again.values()) else again

            try:
                panes = wait_until(reaped, 1.0, "tmux to reap exited panes", interval=0.01)
            except WaitTimeoutError:
                log.warning("tmux has not reaped a dead pane", extra={"socket": self.socket_name})
        return panes

    def _list_panes(self) -> tuple[dict[int, PaneInfo], int]:
        result: dict[int, PaneInfo] = {}
        server_pid = 0
        for line in self._cmd("list-panes", "-a", "-F", _PANE_FORMAT):
            fields = line.split("\t", 8)
            if len(fields) != 9:
                continue
            server, pane_id, tag, window, dead, status, sig, pid, command = fields
            server_pid = int(server)
            worker = _int_or_none(tag)
            if worker is None:
                continue  # a pane being created, before its tag is set
            is_dead = dead == "1"
            result[worker] = PaneInfo(
                pane_id=pane_id,
                worker=worker,
                window=int(window),
                dead=is_dead,
                dead_status=_int_or_none(status) if is_dead else None,
                dead_signal=_int_or_none(sig) if is_dead else None,
                pid=None if is_dead else _int_or_none(pid),
                current_command=command,
            )
        return result, server_pid

    def pane_sizes(self) -> dict[int, tuple[int, int]]:
        """Worker number -> its pane's (columns, lines)."""
        sizes = {}
        for line in self._cmd("list-panes", "-a", "-F", "#{" + WORKER_OPTION + "}\t#{pane_width}\t#{pane_height}"):
            tag, _, size = line.partition("\t")
            width, _, height = size.partition("\t")
            worker = _int_or_none(tag)
            if worker is not None and width.isdigit() and height.isdigit():
                sizes[worker] = (int(width), int(height))
        return sizes

    def pane(self, worker: int) -> PaneInfo:
        found = self.panes().get(worker)
        if found is None:
            raise NotFoundError(f"worker {worker} has no pane on tmux server {self.socket_name}")
        return found

    # -- talking to panes --------------------------------------------------------------------------

    def paste(self, pane_id: str, text: str) -> None:
        """Paste `text` as one bracketed paste (newlines do not submit); no newline is added.

        The buffer goes in through stdin (no temp file, no argv limit) under a unique name, and
        `paste-buffer -d` deletes it. Brackets are sent only if the app enabled bracketed paste.
        """
        text = text.removesuffix("\n")
        if not text:
            return
        buffer = f"orch-{uuid.uuid4().hex}"
        self._direct(["load-buffer", "-b", buffer, "-"], os.environ, stdin=text.encode())
        try:
            with self._errors("paste-buffer"):
                self._pane(pane_id).paste_buffer(buffer_name=buffer, delete_after=True, bracket=True)
        except SandboxError:
            with contextlib.suppress(OSError, SandboxError):  # best effort: the pane may be gone
                self.server.cmd("delete-buffer", "-b", buffer)
            raise

    def send_keys(self, pane_id: str, *keys: str) -> None:
        """Send tmux key names ("Enter", "C-u", "Down"); strings that are not key names go literally."""
        if keys:
            self._cmd("send-keys", "--", *keys, target=pane_id)

    def capture(self, pane_id: str, lines: int | None = None) -> str:
        """The visible screen, or the last `lines` lines incl. scrollback (blank tail dropped); as tmux does by
        default, trailing spaces are trimmed from each line."""
        if lines is None:
            return "\n".join(self._cmd("capture-pane", "-p", target=pane_id))
        if lines <= 0:
            return ""
        out = self._cmd("capture-pane", "-p", "-S", f"-{lines}", target=pane_id)
        while out and not out[-1].strip():
            out.pop()
        return "\n".join(out[-lines:])

    def pipe_to(self, pane_id: str, path: Path) -> None:
        """Append everything the pane prints to `path` (idempotent); the file outlives the server."""
        path = path.resolve()
        try:
            path.open("ab").close()  # fail here, not silently inside tmux's pipe shell
        except OSError as exc:
            raise SandboxError(f"cannot write transcript {path}: {exc.strerror}") from None
        # pipe-pane expands formats in its command, so a `#` in the path must be doubled.
        command = "exec cat >> " + shlex.quote(str(path)).replace("#", "##")
        # Not `-o`: that toggles, so a second call would silently stop the transcript. Without it tmux
        # replaces any old pipe, so calling this again (after a respawn, say) is safe.
        with self._errors("pipe-pane"):
            self._pane(pane_id).pipe(command)

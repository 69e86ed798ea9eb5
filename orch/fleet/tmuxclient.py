"""The tmux client: every command to a run's tmux server waits for its answer at most a deadline.

A tmux server that is stopped (SIGSTOP) or wedged still accepts a client's connection and never answers, and
libtmux 0.62 waits on its client with no deadline (tmux_cmd's `communicate()`; upstream, tmux-python/libtmux#735
and #757 propose one). So every call orch makes goes through `Client.run`, libtmux's through `Server.cmd` as
well: past the deadline the client is killed and reaped, and the caller gets NoAnswerError naming the command
and the server, which it can tell from a server that is gone. A stopped server that is resumed may still run
the commands its killed clients had sent: a call that got no answer may have happened. Imported only where orch
talks to tmux (libtmux costs a tenth of a second to import).
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import libtmux
from libtmux.common import tmux_cmd

from orch.contracts import LaunchSpec
from orch.errors import NoAnswerError, UsageError

CALL_TIMEOUT = 60.0
"""Seconds one tmux command may take: tmux answers in milliseconds, on a loaded machine in seconds."""
HUNG = "resume it if it was stopped (kill -CONT), or end it, and its workers with it"


@dataclass(frozen=True)
class Client:
    """How to reach one tmux server (`tmux -L SOCKET -f /dev/null`), and how long a command may take."""

    socket_name: str
    tmux_bin: str
    timeout: float = CALL_TIMEOUT

    @classmethod
    def find(cls, socket_name: str, timeout: float | None = None) -> Client:
        """The client of the tmux on PATH (UsageError if there is none); `timeout` None: CALL_TIMEOUT."""
        path = shutil.which("tmux")
        if path is None:
            from orch import prereqs

            raise UsageError("tmux is not installed (not found on PATH)", hint=prereqs.TMUX_FIX)
        return cls(socket_name, path, CALL_TIMEOUT if timeout is None else timeout)

    def argv(self, *args: str) -> list[str]:
        return [self.tmux_bin, "-L", self.socket_name, "-f", "/dev/null", *args]

    @staticmethod
    def chain(commands: Sequence[Sequence[str]]) -> list[str]:
        """Several tmux commands for one client call: a lone ";" argument separates them."""
        return [arg for command in commands for arg in (";", *command)][1:]

    @staticmethod
    def spawn_args(spec: LaunchSpec) -> list[str]:
        """`-c`, `-e` and the argv for new-session / new-window / split-window / respawn-pane."""
        if not spec.argv:
            raise UsageError("cannot launch an empty command", hint="give the agent's argv")
        args = ["-c", str(spec.cwd.resolve())]
        for key, value in spec.env.items():
            args += ["-e", f"{key}={value}"]
        # tmux runs a single-argument command through `sh -c`; with two or more it execs them directly.
        argv = ["env", *spec.argv] if len(spec.argv) == 1 else list(spec.argv)
        return [*args, "--", *argv]

    def run(
        self, args: Sequence[str], env: Mapping[str, str] | None = None, stdin: bytes = b""
    ) -> subprocess.CompletedProcess[bytes]:
        """One tmux command run to its end, with the client's process environment `env` and `stdin`; OSError if
        tmux cannot run, NoAnswerError once the deadline has passed (subprocess.run kills and reaps the client)."""
        try:
            return subprocess.run(self.argv(*args), input=stdin, capture_output=True, env=env, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            from orch import procs  # psutil, for a client with no answer only (a tenth of `orch brief`'s imports)

            said = f"tmux {args[0]} got no answer from tmux server {self.socket_name} in {self.timeout:g} s"
            pid = self.server_pid()
            if pid is None:
                raise NoAnswerError(f"{said}: the server is stopped or hung", hint=HUNG) from None
            if procs.stopped(pid):
                raise NoAnswerError(f"{said}: it is stopped (pid {pid})", hint=f"resume it: kill -CONT {pid}") from None
            raise NoAnswerError(f"{said}: it hangs (pid {pid})", hint=f"{HUNG}: kill {pid}") from None

    def server_pid(self) -> int | None:
        """The server's pid, found by its command line (a server keeps its first client's: `tmux -L SOCKET ...
        start-server`, as orch.fleet.tmux starts it); None if no such process is in sight."""
        from orch import procs

        for pid in procs.pids():
            argv = procs.cmdline(pid)
            if "start-server" in argv and ("-L", self.socket_name) in itertools.pairwise(argv):
                return pid
        return None


class _Done(tmux_cmd):
    """libtmux's result of one command, made from a bounded run (tmux_cmd's own __init__ runs it unbounded)."""

    def __init__(self, argv: list[str], done: subprocess.CompletedProcess[bytes]) -> None:  # no super(): see above
        self.cmd = argv
        self.returncode = done.returncode
        stdout = done.stdout.decode(errors="backslashreplace").split("\n")
        while stdout and not stdout[-1]:
            stdout.pop()
        self.stdout = stdout
        self.stderr = [line for line in done.stderr.decode(errors="backslashreplace").split("\n") if line]


class Server(libtmux.Server):
    """libtmux's Server whose commands (its objects' too: a Pane's go through its server) run through `client`."""

    def __init__(self, client: Client) -> None:
        super().__init__(socket_name=client.socket_name, config_file="/dev/null", tmux_bin=client.tmux_bin)
        self.client = client

    def cmd(self, cmd: str, *args: Any, target: str | int | None = None) -> tmux_cmd:
        argv = [cmd, *(["-t", str(target)] if target is not None else []), *(str(arg) for arg in args)]
        return _Done(self.client.argv(*argv), self.client.run(argv))

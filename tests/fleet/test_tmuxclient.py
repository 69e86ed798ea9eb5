"""orch.fleet.tmuxclient on a real tmux server: a stopped server (SIGSTOP) costs a call its deadline and a clear
NoAnswerError, libtmux's calls included, and leaves no client behind; the arguments a launch becomes."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from orch import procs
from orch.contracts import LaunchSpec
from orch.errors import NoAnswerError, UsageError
from orch.fleet.tmux import TmuxServer
from orch.fleet.tmuxclient import HUNG, Client, Server

DEADLINE = 1.0
SLACK = 15.0  # a loaded 2-core machine starts a process in seconds, never in a deadline's worth of them


@pytest.fixture
def stopped(tmux_tmpdir: Path, tmp_path: Path) -> Iterator[TmuxServer]:
    """A run's tmux server with one pane, stopped (SIGSTOP) after it started; resumed and killed at the end."""
    server = TmuxServer(f"orch-test-{uuid.uuid4().hex[:8]}", timeout=DEADLINE)
    server.start("orch-test", LaunchSpec(argv=["sleep", "600"], cwd=tmp_path), 1, dict(os.environ))
    pid = int(server._cmd("display-message", "-p", "#{pid}")[0])
    os.kill(pid, signal.SIGSTOP)
    try:
        yield server
    finally:
        os.kill(pid, signal.SIGCONT)
        server.kill()


def no_answer(call: Callable[..., object], *args: object) -> NoAnswerError:
    """The error `call` raised at its deadline, its tmux client gone (killed and reaped)."""
    before, started = set(procs.children(os.getpid())), time.monotonic()
    with pytest.raises(NoAnswerError) as caught:
        call(*args)
    assert DEADLINE <= time.monotonic() - started < DEADLINE + SLACK
    assert set(procs.children(os.getpid())) <= before, "the client that got no answer is killed and reaped"
    return caught.value


def test_every_kind_of_call_to_a_stopped_server_ends_at_its_deadline(stopped: TmuxServer) -> None:
    client = stopped.client
    error = no_answer(client.run, ["list-sessions"])
    pid = client.server_pid()
    assert pid is not None and error.one_line() == (
        f"tmux list-sessions got no answer from tmux server {stopped.socket_name} in 1 s: it is stopped (pid {pid}) "
        f"(hint: resume it: kill -CONT {pid})"
    )
    no_answer(Server(client).cmd, "list-panes", "-a")  # libtmux's command API
    no_answer(Server(client).getenv, "PATH")  # libtmux's own methods go through it
    assert stopped.server.is_alive() is False, "libtmux's takes any error for a dead server: TmuxServer.alive asks"


def test_a_socket_that_takes_a_connection_and_never_answers_is_no_answer_too(tmux_tmpdir: Path) -> None:
    """Not a stopped tmux: anything listening on the server's socket that never replies (no tmux process of that
    socket is in sight, so the hint can name no pid)."""
    name = f"orch-test-{uuid.uuid4().hex[:8]}"
    folder = tmux_tmpdir / f"tmux-{os.getuid()}"
    folder.mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(folder / name))
        listener.listen()
        client = Client.find(name, DEADLINE)
        error = no_answer(client.run, ["list-panes"])
    assert client.server_pid() is None
    assert error.one_line() == (
        f"tmux list-panes got no answer from tmux server {name} in 1 s: the server is stopped or hung (hint: {HUNG})"
    )


def test_a_call_answered_is_libtmux_s_result(tmux_tmpdir: Path, tmp_path: Path) -> None:
    server = TmuxServer(f"orch-test-{uuid.uuid4().hex[:8]}")
    try:
        server.start("orch-test", LaunchSpec(argv=["sleep", "600"], cwd=tmp_path), 1, dict(os.environ))
        done = server.server.cmd("list-sessions", "-F", "#{session_name}")
        assert (done.returncode, done.stdout, done.stderr) == (0, ["orch-test"], [])
        failed = server.server.cmd("list-windows", target="=nosuch")
        assert failed.returncode == 1 and failed.stdout == [] and "nosuch" in failed.stderr[0]
        assert done.cmd[:5] == [server.client.tmux_bin, "-L", server.socket_name, "-f", "/dev/null"]
    finally:
        server.kill()


def test_a_launch_becomes_its_directory_environment_and_argv(tmp_path: Path) -> None:
    spec = LaunchSpec(argv=[sys.executable, "-V"], env={"A": "1"}, cwd=tmp_path)
    assert Client.spawn_args(spec) == ["-c", str(tmp_path.resolve()), "-e", "A=1", "--", sys.executable, "-V"]
    alone = LaunchSpec(argv=["true"], cwd=tmp_path)
    assert Client.spawn_args(alone)[-3:] == ["--", "env", "true"], "one argument would go through sh -c"
    with pytest.raises(UsageError, match="empty command"):
        Client.spawn_args(LaunchSpec(argv=[], cwd=tmp_path))
    assert Client.chain([["a", "1"], ["b"]]) == ["a", "1", ";", "b"]

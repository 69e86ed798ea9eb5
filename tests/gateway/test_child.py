"""The server child as a fork of its supervisor (orch.gateway.child): what it holds, that it dies with its
supervisor and is forked again when it dies, that it never returns into its parent's code, that a fork from a
process of several threads is refused, and which CA bundle its aiohttp was imported with."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from orch import procs
from orch.errors import OrchError
from orch.gateway.child import fork_server
from orch.gateway.wire import ChildStart
from orch.waits import wait_until
from tests.gateway.gw import boot_for, gateway


def _fds(pid: int) -> list[str]:
    fd_dir = Path(f"/proc/{pid}/fd")
    return [os.readlink(fd_dir / fd) for fd in os.listdir(fd_dir)]


def test_the_child_holds_its_socket_and_report_pipe_and_nothing_else_of_the_supervisors(tmp_path: Path) -> None:
    """No starter's ready pipe (its EOF tells the starter the supervisor died), no model's ready pipe, no state
    file; stdin is /dev/null. Its only pipe is its report pipe's write end."""
    with gateway(tmp_path) as gw:
        child = int(gw.client.info()["pid"])
        assert child != gw.handle.pid and procs.cmdline(child) == procs.cmdline(gw.handle.pid)
        held = _fds(child)
        assert len([target for target in held if target.startswith("pipe:")]) == 1, held
        assert os.readlink(f"/proc/{child}/fd/0") == os.devnull
        assert not [target for target in held if target.endswith(".tokens")]


def test_the_child_dies_with_its_supervisor_and_is_forked_again_when_it_dies(tmp_path: Path) -> None:
    with gateway(tmp_path) as gw:
        first = int(gw.client.info()["pid"])
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: gw.client.health() and gw.client.info()["pid"] != first, 30, "a second server child")
        second = int(gw.client.info()["pid"])
        assert gw.client.info()["life"] == 2
        assert procs.children(gw.handle.pid).count(second) == 1
        os.kill(gw.handle.pid, signal.SIGKILL)
        wait_until(lambda: not procs.alive(second), 15, "the server child to die with its supervisor")


_FORK_ONCE = """
import os, sys
from orch.gateway.child import fork_server, import_server
from orch.gateway.wire import ChildStart
from orch.gateway.modeldir import GatewayBoot
import socket
boot = GatewayBoot.model_validate_json(sys.stdin.readline())
import_server(live=False)
sock = socket.socket()
read_fd, write_fd = os.pipe()
child = fork_server(ChildStart(boot=boot), sock, write_fd, close=[read_fd])
os.close(write_fd)
print("parent carries on", child.pid != os.getpid(), flush=True)
print("child exit", child.wait(), flush=True)
"""


def test_a_child_that_fails_ends_with_its_code_and_never_returns_into_the_parents_code(tmp_path: Path) -> None:
    """A pricing file that is not there: the child's Gateway cannot start. It says so in one line and exits
    with the error's code; only the parent prints after the fork."""
    boot = boot_for(tmp_path, pricing=str(tmp_path / "no-such-pricing.json"))
    line = json.loads(boot.model_dump_json())
    line["control_key"] = boot.control_key.get_secret_value()
    done = subprocess.run(
        [sys.executable, "-c", _FORK_ONCE], input=json.dumps(line), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["parent carries on True", "child exit 2"], done.stdout
    assert done.stderr.startswith("orch gateway: "), done.stderr


def test_a_fork_beside_another_thread_is_refused(tmp_path: Path) -> None:
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, name="other", daemon=True)
    other.start()
    read_fd, write_fd = os.pipe()
    try:
        boot = boot_for(tmp_path)
        with pytest.raises(OrchError, match="other threads"):
            fork_server(ChildStart(boot=boot), socket.socket(), write_fd, close=[read_fd])
    finally:
        stop.set()
        other.join(5)
        os.close(read_fd)
        os.close(write_fd)


_CA_COUNT = """
from orch.gateway.child import import_server
import sys
import_server(live=sys.argv[1] == "live")
import aiohttp.connector
print(aiohttp.connector._SSL_CONTEXT_VERIFIED.cert_store_stats()["x509_ca"])
"""


@pytest.mark.parametrize("live", [True, False])
def test_an_offline_gateway_imports_aiohttp_without_the_ca_bundle_and_a_live_one_with_it(live: bool) -> None:
    env = {key: value for key, value in os.environ.items() if key != "SSL_CERT_FILE"}
    argv = [sys.executable, "-c", _CA_COUNT, "live" if live else "offline"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=True)
    cas = int(done.stdout)
    assert (cas > 0) if live else (cas == 0)

"""Second Docker engine endpoints on this machine, standing in for a remote engine. Only loopback is used.

- EngineProxy: tcp://127.0.0.1:PORT relayed to the local engine's socket (`DOCKER_HOST=tcp://...`).
- SshEndpoint: a real sshd on 127.0.0.1 with throwaway keys; `DOCKER_HOST=ssh://root@127.0.0.1:PORT` goes
  through the system ssh client (a wrapper on PATH adds our key and known host) and `docker system dial-stdio`.

The client sees a non-local base URL, so orch treats the engine as remote (no bind mounts of local
paths, run folder in a volume, `orch pull`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

import psutil

from orch.waits import wait_until

SSHD = "/usr/sbin/sshd"


class EngineProxy:
    def __init__(self, unix_path: str = "/var/run/docker.sock") -> None:
        self.unix_path = unix_path
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.url = f"tcp://127.0.0.1:{self.port}"
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> EngineProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._closed.set()
        # close() alone does not wake a thread blocked in accept(): the port would keep listening (and
        # relaying to the engine) for the rest of the test session. shutdown() wakes it.
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self._thread.join(10)
        with contextlib.suppress(OSError):
            self.listener.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(self.unix_path)
            except OSError:
                client.close()
                continue
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
        except OSError:
            with contextlib.suppress(OSError):
                dst.close()


PORT_TRIES = 5
"""Ports tried for sshd: each is free when picked, then released for sshd to bind, and another process on this
shared machine may bind it first (sshd then exits: "Address already in use")."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listens(pid: int, port: int) -> bool:
    """Process `pid` itself listens on 127.0.0.1:`port` (a connection that succeeds may reach another's)."""
    try:
        found = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in found)


@dataclass(frozen=True)
class SshEndpoint:
    url: str
    bin_dir: Path
    """Put first on PATH: its `ssh` adds our client config (key, port, known host)."""

    @classmethod
    @contextlib.contextmanager
    def start(cls, root: Path) -> Iterator[SshEndpoint]:
        for key in ("host_key", "client_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / key)], check=True)
        (root / "authorized_keys").write_text((root / "client_key.pub").read_text())
        (root / "ssh_config").write_text(
            "Host 127.0.0.1\n"
            f"  IdentityFile {root / 'client_key'}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {root / 'known_hosts'}\n  StrictHostKeyChecking yes\n  BatchMode yes\n"
            # docker-py opens one ssh connection per API connection: share one (as users should too).
            f"  ControlMaster auto\n  ControlPath {root}/cm-%C\n  ControlPersist 60\n"
        )
        bin_dir = root / "bin"
        bin_dir.mkdir()
        wrapper = bin_dir / "ssh"
        wrapper.write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {root / "ssh_config"} "$@"\n')
        wrapper.chmod(0o755)
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
        port, proc, log = _sshd(root)
        try:
            # docker-py passes `-p` itself (22 unless the URL names a port): the URL says it all.
            yield cls(url=f"ssh://root@127.0.0.1:{port}", bin_dir=bin_dir)
        finally:
            subprocess.run(
                ["ssh", "-F", str(root / "ssh_config"), "-O", "exit", "-p", str(port), "127.0.0.1"],
                capture_output=True,
                check=False,
            )
            proc.terminate()
            proc.wait(10)
            log.close()


def ssh_env(endpoint: SshEndpoint) -> dict[str, str]:
    return {**os.environ, "PATH": f"{endpoint.bin_dir}{os.pathsep}{os.environ['PATH']}"}


def _sshd(root: Path) -> tuple[int, subprocess.Popen[bytes], IO[bytes]]:
    """sshd listening on a free port of 127.0.0.1 (its config and known host for that port written in `root`):
    the port, the process, its log. Another port when one was taken between its pick and sshd's bind."""
    host_pub = " ".join((root / "host_key.pub").read_text().split()[:2])
    said = ""
    for _ in range(PORT_TRIES):
        port = _free_port()
        (root / "sshd_config").write_text(
            f"Port {port}\nListenAddress 127.0.0.1\nHostKey {root / 'host_key'}\n"
            f"AuthorizedKeysFile {root / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            f"PidFile {root / 'sshd.pid'}\nAllowUsers root\n"
        )
        (root / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub}\n")
        log = (root / "sshd.log").open("wb")
        proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(root / "sshd_config")], stdout=log, stderr=log)
        up = lambda p=proc, port=port: p.poll() is not None or _listens(p.pid, port)  # noqa: E731
        wait_until(up, 20, "sshd to listen")
        if proc.poll() is None:
            return port, proc, log
        log.close()
        said = (root / "sshd.log").read_text()[-500:]
        if "Address already in use" not in said:
            break
    raise RuntimeError(f"sshd exited: {said}")

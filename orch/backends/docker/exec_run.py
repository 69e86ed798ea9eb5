"""Commands in a run's container as its user: one `docker exec` through the engine's API (stdin sent,
then EOF, output as frames), or an interactive `docker exec -it` that takes over this process.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
from collections.abc import Iterator
from typing import Any, NoReturn

import docker
from docker.models.containers import Container
from docker.utils.socket import frames_iter

from orch.errors import UsageError
from orch.run.records import DockerRunInfo


class Exec:
    """One `docker exec` as the run's user: stdin sent then closed, output as (stream, bytes) frames."""

    def __init__(
        self, client: docker.DockerClient, container: Container, user: str, argv: list[str], stdin: str | None
    ) -> None:
        self.api = client.api
        self.stdin = stdin
        self.exec_id = self.api.exec_create(
            container.id, argv, stdin=stdin is not None, stdout=True, stderr=True, user=user
        )["Id"]

    def frames(self) -> Iterator[tuple[int, bytes]]:
        sock = self.api.exec_start(self.exec_id, socket=True)
        try:
            if self.stdin is not None:
                _send_and_half_close(sock, self.stdin.encode())
            frames: Iterator[tuple[int, bytes]] = frames_iter(sock, tty=False)  # type: ignore[no-untyped-call]
            yield from frames
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    def exit_code(self) -> int:
        code = self.api.exec_inspect(self.exec_id).get("ExitCode")
        return int(code) if code is not None else 1


def exec_argv(info: DockerRunInfo, argv: list[str]) -> NoReturn:
    """Replace this process with an interactive `docker exec -it` (the CLI owns the terminal best)."""
    docker_cli = shutil.which("docker")
    if docker_cli is None:
        raise UsageError("`orch attach` to a container run needs the docker CLI", hint="apt-get install docker.io")
    host = ["-H", info.container.docker_host] if info.container.docker_host else []
    cmd = [docker_cli, *host, "exec", "-it", "-u", info.container.user, info.container.name, *argv]
    os.execvp(cmd[0], cmd)


def _send_and_half_close(sock: Any, data: bytes) -> None:
    """Write stdin for an exec, then signal EOF while still reading its output."""
    raw = getattr(sock, "_sock", sock)
    raw.sendall(data)
    proc = getattr(raw, "proc", None)
    if proc is not None:  # docker's ssh transport: EOF is the ssh process's stdin closing (dial-stdio)
        proc.stdin.close()
    else:
        raw.shutdown(socket.SHUT_WR)

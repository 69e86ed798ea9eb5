"""A second Docker engine endpoint on this machine: tcp://127.0.0.1:PORT relayed to the local socket.

It stands in for a remote engine (`DOCKER_HOST=tcp://...`): the client sees a non-local base URL, so orch
treats the engine as remote (no bind mounts of local paths, run folder in a volume, `orch pull`). Only
loopback is involved.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType


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

"""The scripted model server, plus a request log that says who asked: one JSON line per request.

`python -m bench.recorder --url-file URL --log-file LOG` serves orch's scripted Messages API on
127.0.0.1 and appends, for every request, `{"t_ns": monotonic, "path", "step", "session", "tokens"}`.
`session` is Claude Code's `X-Claude-Code-Session-Id` header: the benchmark maps it to workers through
their SessionStart hooks, so a request from anyone else (a lead spending tokens to monitor) shows up.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from orch.offline.apis.base import tokens
from orch.offline.modelserver import RequestRecord, ScriptedModelServer


class Recorder:
    """Appends one JSON line per request to `log_file` (O_APPEND: whole lines, in order)."""

    def __init__(self, log_file: Path) -> None:
        self.log_file = log_file
        self.lock = threading.Lock()

    def __call__(self, record: RequestRecord, headers: Mapping[str, str], body: Mapping[str, Any]) -> None:
        entry = {
            "t_ns": time.monotonic_ns(),
            "path": record.path,
            "step": record.step,
            "session": headers.get("X-Claude-Code-Session-Id"),
            "tokens": tokens(json.dumps(body)),
        }
        line = (json.dumps(entry) + "\n").encode()
        with self.lock:
            fd = os.open(self.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)


@dataclass(frozen=True)
class Request:
    t_ns: int
    path: str
    step: str
    session: str | None
    tokens: int


def read_log(path: Path) -> list[Request]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            data = json.loads(line)
            out.append(Request(data["t_ns"], data["path"], data["step"], data.get("session"), data["tokens"]))
        except (ValueError, KeyError, TypeError):
            continue
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.recorder")
    parser.add_argument("--url-file", type=Path, required=True)
    parser.add_argument("--log-file", type=Path, required=True)
    args = parser.parse_args(argv)
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    with ScriptedModelServer(observer=Recorder(args.log_file)) as server:
        partial = args.url_file.with_name(f".{args.url_file.name}.{os.getpid()}")
        partial.write_text(server.url + "\n")
        partial.replace(args.url_file)
        while not stopping.wait(3600):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

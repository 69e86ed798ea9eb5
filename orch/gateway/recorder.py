"""model/exchanges-<n>.jsonl.gz: every completed exchange of worker n, one gzip member per line, so a
crash loses at most the line being written and the file stays readable by `gzip -dc` or zcat."""

from __future__ import annotations

import gzip
import os

from orch.gateway.records import Exchange
from orch.run.folder import RunFolder


class Recorder:
    def __init__(self, folder: RunFolder) -> None:
        self.folder = folder

    def append(self, exchange: Exchange) -> None:
        member = gzip.compress((exchange.model_dump_json() + "\n").encode(), compresslevel=5)
        # One write(2) on an O_APPEND fd: concurrent exchanges of a worker never interleave their bytes.
        fd = os.open(self.folder.exchanges(exchange.worker), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, member)
        finally:
            os.close(fd)

"""model/exchanges-<n>.jsonl.gz: every completed exchange of worker n, in the cassette format that replay
reads (orch.gateway.cassette: one gzip member per line)."""

from __future__ import annotations

from orch.gateway.cassette import append_exchange
from orch.gateway.records import Exchange
from orch.run.folder import RunFolder


class Recorder:
    def __init__(self, folder: RunFolder) -> None:
        self.folder = folder

    def append(self, exchange: Exchange) -> None:
        append_exchange(self.folder.exchanges(exchange.worker), exchange)

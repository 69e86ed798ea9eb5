"""The files behind the hot path: each completed exchange's ledger lines, its recording and the usage
snapshot, written by one background task after the worker already has its answer.

The proxy counts an exchange in memory (so the next request meets an exact budget) and hands the rest
here; the task takes everything pending at once and writes it in one thread hop. usage.json (rewritten
whole and fsynced) is rewritten at most every USAGE_EVERY seconds, and at once for a `settle`. Readers
therefore see an exchange in the ledger and the recording a few milliseconds after its answer ended, in
usage.json up to USAGE_EVERY later (`settle` first to see everything). A gateway killed inside that
window loses what it had not written (the books can fall short, never count twice); `drain` writes
everything on a clean stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from orch.gateway.apis.base import ApiProtocol, ToolUse
from orch.gateway.books import Books
from orch.gateway.ledger import Ledger
from orch.gateway.modeldir import Exchange
from orch.gateway.recording.exchanges import Recorder
from orch.gateway.recording.keys import exchange_key

log = logging.getLogger("orch.gateway")
USAGE_EVERY = 0.2
"""Seconds between two rewrites of usage.json by the writer (a settle does not wait for it)."""


@dataclass
class Call:
    """One worker request on its way through."""

    worker: int
    method: str
    path: str
    """Without the /t/<token> prefix; the query string included."""
    kind: str
    body: dict[str, Any]
    seq: int
    job: str | None
    protocol: ApiProtocol
    """The model API the request speaks (orch.gateway.apis.registry, by its path)."""
    started: float = field(default_factory=time.time)


@dataclass
class Done:
    """One completed exchange to write down (the Exchange and its replay key are made off the hot path)."""

    call: Call
    status: int
    headers: dict[str, str]
    """The response headers a recording keeps."""
    stream: bool
    text: str | bytes
    """The response as it came (bytes: decoded off the hot path)."""
    tool_uses: list[ToolUse] | None
    """What the model asked for, for the ledger; None: not a counted turn (nothing to ledger)."""


class Writer:
    def __init__(self, books: Books, ledger: Ledger, recorder: Recorder, run_dir: str, workdir: str) -> None:
        self.books, self.ledger, self.recorder = books, ledger, recorder
        self.run_dir, self.workdir = run_dir, workdir
        self._pending: list[Done] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self._urgent = False
        self._flushed = 0.0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="gateway-writer")

    def submit(self, done: Done) -> None:
        self._pending.append(done)
        self._idle.clear()
        self._wake.set()

    def _write(self, batch: list[Done]) -> None:
        for done in batch:
            call = done.call
            if done.tool_uses is not None:
                results = call.protocol.tool_results(call.body)
                self.ledger.record(call.worker, call.job, call.seq, done.tool_uses, results)
            self.recorder.append(
                Exchange(
                    seq=call.seq,
                    ts=call.started,
                    worker=call.worker,
                    job=call.job,
                    method=call.method,
                    path=call.path,
                    request=call.body,
                    status=done.status,
                    headers=done.headers,
                    stream=done.stream,
                    body=done.text if isinstance(done.text, str) else done.text.decode(errors="replace"),
                    key=exchange_key(call.path, call.body, self.run_dir, self.workdir),
                )
            )

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, []
            try:
                if batch:
                    await asyncio.to_thread(self._write, batch)
                due = self._flushed + USAGE_EVERY - time.monotonic()
                if self.books.dirty and due > 0 and not self._urgent:
                    asyncio.get_running_loop().call_later(due, self._wake.set)
                    continue  # not idle: usage.json is still to be written
                self._urgent = False
                await self.books.flush()
                self._flushed = time.monotonic()
            except Exception:  # a full disk must not stop the answers, nor kill the writer
                log.exception("could not write %d exchange(s)", len(batch))
            if not self._pending:
                self._idle.set()

    async def settled(self) -> None:
        """Until everything submitted so far is written (and usage.json rewritten, now)."""
        if self._task is not None and not self._task.done() and not self._idle.is_set():
            self._urgent = True
            self._wake.set()
            await self._idle.wait()

    async def drain(self) -> None:
        """Write everything submitted (a clean stop), then stop the task."""
        if self._task is None:
            return
        await self.settled()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

"""Replay: which recorded exchange answers a request, when a run is replayed from a cassette.

A request is found by worker and its key (orch.gateway.recording.keys: kind, conversation, turn), never by its
whole body. Main turns are what decides a replay: a main request with no recording is a `ReplayMiss`
saying what differs. Side and count_tokens calls decide nothing, so they take the nearest recording of
the same worker and kind, else a minimal answer its API synthesises (ApiProtocol.synthesised), and never
miss. Every answer names this run's folders (orch.gateway.recording.translate).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orch.gateway.apis.registry import for_request
from orch.gateway.modeldir import Exchange, ExchangeKey
from orch.gateway.recording.exchanges import recording
from orch.gateway.recording.keys import exchange_key, first_text
from orch.gateway.recording.normalise import Folders, normalise
from orch.gateway.recording.translate import translate
from orch.text import shorten

MISS_TEXT = 80
"""How much of a normalised first message a miss quotes."""


@dataclass(frozen=True)
class ReplayMiss:
    """A main request the cassette has no answer for: the gateway refuses it with `message`."""

    worker: int
    turn: int
    message: str


@dataclass
class _Attempts:
    """The recordings of one (worker, kind, conversation, turn): runs of consecutive requests (a turn
    and its retries), each answered by its best exchange; the next request of that key takes the next
    run not yet used, a retry (the same key again, nothing in between) takes the same one again."""

    runs: list[list[Exchange]] = field(default_factory=list)
    used: int = 0


def _best(exchanges: list[Exchange]) -> Exchange:
    """Of one turn's recordings (oldest first): a success, then a client error (a budget refusal replays
    as one), then a rate limit, then a server error; among equals the latest (a retry that worked ends
    the run). By position, not seq: seq restarts with each gateway life."""

    def rank(item: tuple[int, Exchange]) -> tuple[int, int]:
        status = item[1].status
        klass = 0 if status < 400 else 3 if status >= 500 else 2 if status == 429 else 1
        return klass, -item[0]

    return min(enumerate(exchanges), key=rank)[1]


Index = tuple[int, str, str, int]
"""(worker, kind, conversation, turn)."""


class Replayer:
    """Answers requests from a cassette's recording. Pure apart from loading: no clock, no I/O per call."""

    def __init__(self, cassette: Path, run_dir: str, workdir: str) -> None:
        self.run_dir, self.workdir = run_dir, workdir
        exchanges, (recorded_run, recorded_workdir) = recording(cassette)
        self._lock = threading.Lock()
        self._index: dict[Index, _Attempts] = defaultdict(_Attempts)
        self._by_kind: dict[tuple[int, str], list[Exchange]] = defaultdict(list)
        self._first_text: dict[tuple[int, str], str] = {}
        """(worker, conversation) -> its normalised first message, for miss messages (main kind only)."""
        self._last: dict[int, Index] = {}
        """Per worker, the main key answered last: the same key again is a retry."""
        last_recorded: dict[int, Index] = {}
        # Answers name the recording's folders (a Write's file_path): they are given this run's instead.
        self._folders: Folders = tuple(
            (old, new)
            for old, new in ((recorded_run, run_dir), (recorded_workdir, workdir))
            if old and new and old != new
        )
        # File order is each worker's order (one file per worker, appended as exchanges complete).
        for exchange in exchanges:
            key = exchange.key
            index = (exchange.worker, key.kind, key.conversation, key.turn)
            attempts = self._index[index]
            if key.kind == "main":
                # Consecutive main requests with one key are a turn and its retries: one run.
                if last_recorded.get(exchange.worker) == index and attempts.runs:
                    attempts.runs[-1].append(exchange)
                else:
                    attempts.runs.append([exchange])
                last_recorded[exchange.worker] = index
                if (exchange.worker, key.conversation) not in self._first_text:
                    text = normalise(first_text(exchange.path, exchange.request), recorded_run, recorded_workdir)
                    self._first_text[(exchange.worker, key.conversation)] = text
            else:
                attempts.runs.append([exchange])
                self._by_kind[(exchange.worker, key.kind)].append(exchange)
        self.exchanges = len(exchanges)

    def answer(self, worker: int, method: str, path: str, body: dict[str, Any]) -> Exchange | ReplayMiss:
        answer = self._answer(worker, method, path, body)
        return translate(answer, self._folders) if isinstance(answer, Exchange) else answer

    def _answer(self, worker: int, method: str, path: str, body: dict[str, Any]) -> Exchange | ReplayMiss:
        key = exchange_key(path, body, self.run_dir, self.workdir)
        index = (worker, key.kind, key.conversation, key.turn)
        with self._lock:
            attempts = self._index.get(index)
            if key.kind == "main":
                if attempts is None:
                    return ReplayMiss(worker, key.turn, self._miss(worker, path, key, body))
                retry = self._last.get(worker) == index and attempts.used > 0
                self._last[worker] = index
                if not retry and attempts.used < len(attempts.runs):
                    attempts.used += 1
                return _best(attempts.runs[max(attempts.used, 1) - 1])
            if key.kind == "other":
                return self._other(worker, method, path, key)
            exact = [run[0] for run in attempts.runs if run[0].status < 400] if attempts else []
            if exact:
                return _best(exact)
            return self._nearest(worker, key) or _synthesised(worker, method, path, body, key)

    def _nearest(self, worker: int, key: ExchangeKey) -> Exchange | None:
        """The worker's recording of this kind closest to this request: same conversation first, then
        the nearest turn, successes only (a recorded side-call failure is no answer to give again)."""
        recorded = [e for e in self._by_kind.get((worker, key.kind), []) if e.status < 400]
        if not recorded:
            return None
        return min(recorded, key=lambda e: (e.key.conversation != key.conversation, abs(e.key.turn - key.turn)))

    def _other(self, worker: int, method: str, path: str, key: ExchangeKey) -> Exchange | ReplayMiss:
        bare = path.split("?", 1)[0]
        same = [
            e for e in self._by_kind.get((worker, "other"), []) if (e.method, e.path.split("?", 1)[0]) == (method, bare)
        ]
        if same:
            return _best(same)
        return ReplayMiss(worker, key.turn, f"worker {worker}: no recording of {method} {shorten(path, 80)}")

    def _miss(self, worker: int, path: str, key: ExchangeKey, body: dict[str, Any]) -> str:
        where = f"worker {worker}, turn {key.turn}"
        turns = sorted(t for (w, k, c, t) in self._index if (w, k, c) == (worker, "main", key.conversation))
        if turns:
            if key.turn > turns[-1]:
                difference = f"recorded turns of that conversation end at {turns[-1]}"
            else:
                difference = f"no recorded turn {key.turn} (recorded: {_numbers(turns)})"
            return f"{where} of conversation {key.conversation}: {difference}"
        text = shorten(normalise(first_text(path, body), self.run_dir, self.workdir), MISS_TEXT)
        # Workers numbered differently in the two runs show up here.
        others = sorted({w for (w, c) in self._first_text if c == key.conversation})
        elsewhere = f" (that conversation was recorded for worker {_numbers(others)})" if others else ""
        mine = [t for (w, _), t in self._first_text.items() if w == worker]
        if mine:
            recorded = "; ".join(f'"{shorten(t, MISS_TEXT)}"' for t in mine[:3])
            more = f" and {len(mine) - 3} more" if len(mine) > 3 else ""
            return f'{where}: no conversation starts with "{text}"; recorded: {recorded}{more}{elsewhere}'
        workers = _numbers(sorted({w for (w, _) in self._first_text}))
        why = elsewhere or f" (recorded workers: {workers})"
        return f'{where}: no conversation starts with "{text}"; worker {worker} has no recorded turns{why}'


def _numbers(values: list[int]) -> str:
    shown = ", ".join(map(str, values[:8]))
    return shown + (f" … {values[-1]}" if len(values) > 8 else "")


def _synthesised(worker: int, method: str, path: str, body: dict[str, Any], key: ExchangeKey) -> Exchange:
    """A minimal answer for a side or count_tokens call the cassette never saw (seq 0: not recorded)."""
    answer = for_request(path).synthesised(
        path.split("?", 1)[0].rstrip("/"), body, key.kind, f"{key.conversation}{key.turn}"
    )
    return Exchange(
        seq=0,
        ts=0.0,
        worker=worker,
        method=method,
        path=path,
        request=body,
        status=200,
        headers={"content-type": answer.content_type},
        stream=answer.stream,
        body=answer.text,
        key=key,
    )

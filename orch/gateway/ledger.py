"""model/ledger.jsonl: the tool calls each worker's model asked for and the results that came back.

Only new entries are written: a tool_use or tool_result id already logged for that worker (in this life
or an earlier one: the ids are read back at start) is skipped, so a retried request, which repeats
every earlier tool result, adds nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Literal

from orch.gateway.apis.base import ToolResult, ToolUse
from orch.gateway.modeldir import LedgerEntry
from orch.run.files import append_line
from orch.run.folder import RunFolder

OUTPUT_LIMIT = 2000
Kind = Literal["tool_use", "tool_result"]


def clip(text: str, limit: int = OUTPUT_LIMIT) -> str:
    """Cut to `limit` characters keeping line breaks (orch.text.shorten folds them; output needs them)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Ledger:
    def __init__(self, folder: RunFolder) -> None:
        self.path = folder.model_ledger
        self._seen: set[tuple[int, str, str]] = set()
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            lines = []
        for line in lines:
            try:
                entry = json.loads(line)
                self._seen.add((int(entry["worker"]), str(entry["kind"]), str(entry["id"])))
            except (ValueError, KeyError, TypeError):
                continue  # a line torn by a crash: its entry is written again when it comes back

    def _new(self, worker: int, kind: Kind, id: str) -> bool:
        key = (worker, kind, id)
        if not id or key in self._seen:
            return False
        self._seen.add(key)
        return True

    def record(
        self, worker: int, job: str | None, seq: int, uses: Sequence[ToolUse], results: Sequence[ToolResult]
    ) -> list[LedgerEntry]:
        now = time.time()
        entries = [
            LedgerEntry(
                ts=now,
                worker=worker,
                job=job,
                seq=seq,
                kind="tool_result",
                id=r.tool_use_id,
                is_error=r.is_error,
                output=clip(r.text),
            )
            for r in results
            if self._new(worker, "tool_result", r.tool_use_id)
        ] + [
            LedgerEntry(ts=now, worker=worker, job=job, seq=seq, kind="tool_use", id=u.id, tool=u.name, input=u.input)
            for u in uses
            if self._new(worker, "tool_use", u.id)
        ]
        for entry in entries:
            append_line(self.path, entry.model_dump_json())
        return entries

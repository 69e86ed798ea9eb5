"""Server-sent events, the one place orch frames and parses them: the gateway's stream tee and replay, the
scripted model's answers, the scripted agent's reader, `orch watch --web`'s stream to its pages. Every model
API streams JSON objects in `data:` lines; Anthropic's and OpenAI Responses' events also carry an `event:`
line with the object's `type`, Gemini's end with CRLF, OpenAI Chat Completions' stream ends with
`data: [DONE]`.

A recorded stream is rewritten line by line (`data_lines` / `joined`), so every line it does not change
stays byte for byte.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

_LINE_END = re.compile("\r\n|\r|\n")  # what ends a line in an event stream (and only that)


def message(data: str, *, event: str | None = None, end: str = "\n") -> str:
    """One event: an `event:` line when named, `data` as one `data:` line per line of it (a line end inside
    it would otherwise end the field, and what follows would be a field of its own), then the blank line."""
    head = f"event: {event}{end}" if event is not None else ""
    return head + "".join(f"data: {line}{end}" for line in _LINE_END.split(data)) + end


def comment(text: str) -> bytes:
    """A comment line (a keep-alive): clients ignore it, proxies see the stream is alive."""
    return "".join(f": {line}\n" for line in _LINE_END.split(text)).encode() + b"\n"


def frame(events: Iterable[dict[str, Any]], *, named: bool = False, crlf: bool = False, done: bool = False) -> bytes:
    """Events as a stream: `event: <type>` before each data line when `named`, CRLF line ends when `crlf`,
    a closing `data: [DONE]` when `done`."""
    end = "\r\n" if crlf else "\n"
    parts = [message(json.dumps(e), event=e["type"] if named else None, end=end) for e in events]
    if done:
        parts.append(message("[DONE]", end=end))
    return "".join(parts).encode()


class SseParser:
    """An incremental splitter: bytes in, the JSON objects of completed events out."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        """The JSON `data:` payloads of the events completed by `chunk` (others are skipped)."""
        # On the buffer, not the chunk: a CRLF (Gemini's event delimiter) may be split between two chunks.
        self._buffer += chunk
        if b"\r" in self._buffer:
            self._buffer = self._buffer.replace(b"\r\n", b"\n")
        out: list[dict[str, Any]] = []
        while (end := self._buffer.find(b"\n\n")) >= 0:
            raw, self._buffer = self._buffer[:end], self._buffer[end + 2 :]
            data = b"\n".join(line[5:].lstrip(b" ") for line in raw.split(b"\n") if line.startswith(b"data:"))
            if not data:
                continue
            try:
                event = json.loads(data)
            except ValueError:
                continue
            if isinstance(event, dict):
                out.append(event)
        return out


def split_events(text: str) -> list[str]:
    """A recorded SSE body as its events, each with its blank-line terminator (replay sends them one by one)."""
    parts = text.split("\n\n")
    events = [p + "\n\n" for p in parts[:-1]]
    if parts[-1]:
        events.append(parts[-1])
    return events


def data_lines(text: str, containing: str = "") -> tuple[list[str], dict[int, dict[str, Any]]]:
    """A recorded stream's lines (with their ends) and, by line number, the JSON object of each `data:` line
    (only those whose text has `containing`: a cheap filter before parsing)."""
    lines = text.splitlines(keepends=True)
    payloads: dict[int, dict[str, Any]] = {}
    for number, line in enumerate(lines):
        if not line.startswith("data: {") or containing not in line:
            continue
        try:
            loaded = json.loads(line[6:])
        except ValueError:
            continue
        if isinstance(loaded, dict):
            payloads[number] = loaded
    return lines, payloads


def joined(lines: list[str], payloads: dict[int, dict[str, Any]], changed: Iterable[int]) -> str:
    """The stream again, the `changed` data lines written from their (rewritten) payloads."""
    for number in changed:
        line = lines[number]
        end = line[len(line.rstrip("\r\n")) :]
        lines[number] = f"data: {json.dumps(payloads[number])}{end}"
    return "".join(lines)

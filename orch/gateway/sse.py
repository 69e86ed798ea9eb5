"""An incremental server-sent-events splitter for the stream tee: bytes in, JSON data objects out."""

from __future__ import annotations

import json
from typing import Any


class SseParser:
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

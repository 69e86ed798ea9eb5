"""What every API of the scripted model shares: the HTTP answer (`Reply`), token estimates, a sample of
an asked-for JSON schema, and the contract each API's class keeps (`OfflineApi`, registered in
orch/offline/apis/registry.py under the gateway protocol's name)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from orch import sse

SIDE_TEXT = "Scripted session"
"""A side call's text answer (titles and the like) when it asks for no JSON, else the text of its strings."""


@dataclass(frozen=True)
class Reply:
    """An HTTP answer and what the request log keeps of its request: `step` says what the script did, the
    model, whether it streamed and the latest typed prompt."""

    status: int
    content_type: str
    body: bytes
    step: str
    headers: Mapping[str, str] = field(default_factory=dict)
    model: str | None = None
    stream: bool = False
    prompt: str | None = None


class OfflineApi(Protocol):
    name: str
    """The gateway protocol's name (orch.gateway.apis.registry) this API answers as."""

    def handles(self, path: str) -> bool:
        """A POST path of this API."""

    def answer(self, path: str, body: Mapping[str, Any], raw: bytes) -> Reply:
        """The answer to one call (`raw`: the body as it came, for token counts)."""


def tokens(text: str | bytes) -> int:
    """A rough token count: 4 bytes a token, at least one."""
    return max(1, len(text) // 4)


def json_reply(status: int, payload: Mapping[str, Any], step: str, headers: Mapping[str, str] | None = None) -> Reply:
    return Reply(status, "application/json", json.dumps(payload).encode(), step, headers or {})


def stream_reply(data: bytes, step: str) -> Reply:
    """A whole SSE answer, sent with its length (the scripted model never trickles)."""
    headers = {"Cache-Control": "no-cache", "request-id": f"req_{uuid.uuid4().hex}"}
    return Reply(200, "text/event-stream", data, step, headers)


def events_reply(events: list[dict[str, Any]], step: str, **framing: bool) -> Reply:
    return stream_reply(sse.frame(events, **framing), step)

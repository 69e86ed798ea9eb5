"""Which model API a worker's request speaks, by its path: several APIs coexist in one run's gateway.

The run's default protocol (Anthropic Messages) answers every path no other protocol claims; each other
protocol module states the paths it handles.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orch.gateway import openai_chat
from orch.gateway.protocol import ApiProtocol

ROUTES: list[tuple[Callable[[str, str], bool], ApiProtocol]] = [
    (lambda method, path: path.split("?", 1)[0] in openai_chat.PATHS, openai_chat.ChatCompletionsProtocol()),
]
"""(claims the request, protocol), first match wins."""


def protocol_for(method: str, path: str, default: ApiProtocol) -> ApiProtocol:
    return next((protocol for claims, protocol in ROUTES if claims(method, path)), default)


def upstream_body(protocol: ApiProtocol, body: dict[str, Any], raw: bytes) -> bytes:
    """The request body to send upstream: as it came, unless its protocol must change it (usage)."""
    if isinstance(protocol, openai_chat.ChatCompletionsProtocol) and body:
        return protocol.upstream_body(body, raw)
    return raw

"""Which model API a worker's request speaks, by its path: several APIs coexist in one run's gateway.

The run's default protocol (Anthropic Messages) answers every path no other protocol claims; each other
protocol module states the paths it handles.
"""

from __future__ import annotations

from collections.abc import Callable

from orch.gateway import openai_chat
from orch.gateway.protocol import ApiProtocol

ROUTES: list[tuple[Callable[[str, str], bool], ApiProtocol]] = [
    (lambda method, path: path.split("?", 1)[0] in openai_chat.PATHS, openai_chat.ChatCompletionsProtocol()),
]
"""(claims the request, protocol), first match wins."""


def protocol_for(method: str, path: str, default: ApiProtocol) -> ApiProtocol:
    return next((protocol for claims, protocol in ROUTES if claims(method, path)), default)

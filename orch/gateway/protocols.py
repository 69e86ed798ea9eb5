"""Which model API a worker's request speaks, chosen per request by its path, so that several APIs
share one run's gateway: `/v1/messages` is Anthropic's, `/responses` OpenAI's Responses API,
`/chat/completions` OpenAI's Chat Completions, `/v1beta/models/M:generateContent` Gemini's. A path no
protocol claims (a model list, say) is passed through uncounted with the default one's headers."""

from __future__ import annotations

from typing import Any

from orch.gateway.anthropic import AnthropicProtocol
from orch.gateway.gemini import GeminiProtocol
from orch.gateway.openai_chat import ChatCompletionsProtocol
from orch.gateway.protocol import ApiProtocol
from orch.gateway.responses import ResponsesProtocol

PROTOCOLS: tuple[ApiProtocol, ...] = (
    AnthropicProtocol(),
    ResponsesProtocol(),
    ChatCompletionsProtocol(),
    GeminiProtocol(),
)
DEFAULT = PROTOCOLS[0]


def for_path(path: str) -> ApiProtocol:
    """The protocol whose billable calls include `path` (without the /t/<token> prefix), else DEFAULT."""
    return next((p for p in PROTOCOLS if p.billable("POST", path.split("?", 1)[0])), DEFAULT)


def upstream_body(protocol: ApiProtocol, body: dict[str, Any], raw: bytes) -> bytes:
    """The request body to send upstream: as it came, unless its protocol must change it (usage)."""
    if isinstance(protocol, ChatCompletionsProtocol) and body:
        return protocol.upstream_body(body, raw)
    return raw

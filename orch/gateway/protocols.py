"""Which model API a worker's request speaks, chosen per request by its path, so that several APIs
share one run's gateway: `/v1/messages` is Anthropic's, `/responses` OpenAI's Responses API. A path no
protocol claims (a model list, say) is passed through uncounted with the default one's headers."""

from __future__ import annotations

from orch.gateway.anthropic import AnthropicProtocol
from orch.gateway.protocol import ApiProtocol
from orch.gateway.responses import ResponsesProtocol

PROTOCOLS: tuple[ApiProtocol, ...] = (AnthropicProtocol(), ResponsesProtocol())
DEFAULT = PROTOCOLS[0]


def for_path(path: str) -> ApiProtocol:
    """The protocol whose billable calls include `path` (without the /t/<token> prefix), else DEFAULT."""
    return next((p for p in PROTOCOLS if p.billable("POST", path.split("?", 1)[0])), DEFAULT)

"""The registry of model APIs: which one a worker's request speaks, chosen per request by its path, so that
several APIs share one run's gateway: `/v1/messages` is Anthropic's, `/responses` OpenAI's Responses API,
`/chat/completions` OpenAI's Chat Completions, `/v1beta/models/M:generateContent` Gemini's. A path no
protocol claims (a model list, say) is passed through uncounted to the worker's own upstream, with the
headers of that upstream's first protocol.

The live path, the recording and replay all go through PROTOCOLS; the scripted model's side of each API is
registered under the same name in orch/offline/apis/registry.py (tests/gateway/apis/test_registry.py keeps the two
registries in step)."""

from __future__ import annotations

from orch.gateway.apis.anthropic import AnthropicProtocol
from orch.gateway.apis.base import ApiProtocol
from orch.gateway.apis.gemini import GeminiProtocol
from orch.gateway.apis.openai_chat import ChatCompletionsProtocol
from orch.gateway.apis.openai_responses import ResponsesProtocol

PROTOCOLS: tuple[ApiProtocol, ...] = (
    AnthropicProtocol(),
    ResponsesProtocol(),
    ChatCompletionsProtocol(),
    GeminiProtocol(),
)
DEFAULT = PROTOCOLS[0]


BY_NAME: dict[str, ApiProtocol] = {p.name: p for p in PROTOCOLS}


def claiming(path: str) -> ApiProtocol | None:
    """The protocol whose billable calls include `path` (without the /t/<token> prefix), if any."""
    return next((p for p in PROTOCOLS if p.billable("POST", path.split("?", 1)[0])), None)


def for_path(path: str) -> ApiProtocol:
    """The protocol claiming `path`, else DEFAULT."""
    return claiming(path) or DEFAULT


def named(name: str | None) -> ApiProtocol:
    """The protocol of that name, else DEFAULT."""
    return BY_NAME.get(name or "", DEFAULT)


def for_request(path: str) -> ApiProtocol:
    """The protocol of a request path as replay and the recording see it (query and trailing slash aside)."""
    return for_path(path.split("?", 1)[0].rstrip("/") or "/")

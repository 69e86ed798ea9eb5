"""The scripted model's registry of model APIs, one class per API under the name of its gateway protocol
(orch/gateway/apis/registry.py; tests/gateway/apis/test_registry.py keeps the two registries in step). The
server (orch/offline/modelserver.py) hands each POST to the API that claims its path."""

from __future__ import annotations

from orch.offline.apis.anthropic import AnthropicApi
from orch.offline.apis.base import OfflineApi
from orch.offline.apis.gemini import GeminiApi
from orch.offline.apis.openai_chat import ChatApi
from orch.offline.apis.openai_responses import ResponsesApi

APIS: tuple[OfflineApi, ...] = (AnthropicApi(), ResponsesApi(), ChatApi(), GeminiApi())
BY_NAME: dict[str, OfflineApi] = {a.name: a for a in APIS}


def for_path(path: str) -> OfflineApi | None:
    """The API whose calls include this POST path, if any."""
    return next((a for a in APIS if a.handles(path)), None)

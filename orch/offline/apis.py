"""The scripted model's registry of model APIs, one class per API under the name of its gateway protocol
(orch/gateway/protocols.py; tests/gateway/test_protocols.py keeps the two registries in step). The
server (orch/offline/modelserver.py) hands each POST to the API that claims its path."""

from __future__ import annotations

from orch.offline.anthropic import AnthropicApi
from orch.offline.chat import ChatApi
from orch.offline.gemini import GeminiApi
from orch.offline.reply import OfflineApi
from orch.offline.responses import ResponsesApi

APIS: tuple[OfflineApi, ...] = (AnthropicApi(), ResponsesApi(), ChatApi(), GeminiApi())
BY_NAME: dict[str, OfflineApi] = {a.name: a for a in APIS}


def for_path(path: str) -> OfflineApi | None:
    """The API whose calls include this POST path, if any."""
    return next((a for a in APIS if a.handles(path)), None)

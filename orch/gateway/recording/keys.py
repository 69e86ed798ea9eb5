"""How replay finds a request's recording: by worker, conversation and turn, never by its whole body.

- kind: `main` (the agent's own turns), `side` (session titles and the like), `count_tokens`, `other`
  (any other endpoint): each API says which is which (ApiProtocol.replay_parts);
- conversation: sha256 (16 hex) of the conversation's first typed message, normalised
  (orch.gateway.recording.normalise);
- turn: the number of messages (or input items, or contents) in the request.

Keys are computed once, at record time (with the recording run's paths), and stored in each Exchange.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orch.gateway.apis.registry import for_request
from orch.gateway.modeldir import ExchangeKey
from orch.gateway.recording.normalise import conversation


def exchange_key(path: str, body: Mapping[str, Any], run_dir: str, workdir: str) -> ExchangeKey:
    """How replay finds this request's recording (the gateway stores it with every exchange)."""
    parts = for_request(path).replay_parts(path.split("?", 1)[0].rstrip("/"), body)
    return ExchangeKey(kind=parts.kind, conversation=conversation(parts.first_text, run_dir, workdir), turn=parts.turn)


def first_text(path: str, body: Mapping[str, Any]) -> str:
    """The raw text of the request's first typed message (a miss quotes it)."""
    return for_request(path).replay_parts(path.split("?", 1)[0].rstrip("/"), body).first_text

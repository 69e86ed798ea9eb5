"""PLACEHOLDER until the replay helper's module lands: the names and signatures of COMMON.md only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from orch.errors import UsageError
from orch.gateway.records import Exchange, ExchangeKey, GatewayBoot


@dataclass(frozen=True)
class ReplayMiss:
    worker: int
    turn: int
    message: str


def exchange_key(path: str, body: dict[str, Any], run_dir: str, workdir: str) -> ExchangeKey:
    messages = body.get("messages")
    turn = len(messages) if isinstance(messages, list) else 0
    if path == "/v1/messages/count_tokens":
        return ExchangeKey(kind="count_tokens", conversation="", turn=turn)
    if path != "/v1/messages":
        return ExchangeKey(kind="other", conversation="", turn=turn)
    kind: Literal["main", "side"] = "main" if body.get("stream") and body.get("tools") else "side"
    return ExchangeKey(kind=kind, conversation="", turn=turn)


class Replayer:
    def __init__(self, cassette_dir: Path, boot: GatewayBoot) -> None:
        raise UsageError("replay is not implemented yet (placeholder orch/gateway/replay.py)")

    def answer(self, worker: int, method: str, path: str, body: dict[str, Any]) -> Exchange | ReplayMiss:
        raise NotImplementedError

"""Worker tokens: minted by the gateway, held in memory only, one live token per worker, each bound to the
worker's agent kind (which picks its upstream)."""

from __future__ import annotations

import hashlib
import re
import secrets

_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def mint(run: str, worker: int) -> str:
    return f"orch-{_SAFE.sub('-', run)}-w{worker}-{secrets.token_hex(16)}"


def digest(token: str) -> str:
    """A short, safe-to-log name for a token (never log the token itself)."""
    return hashlib.sha256(token.encode()).hexdigest()[:10]


class TokenTable:
    def __init__(self, initial: dict[int, str] | None = None, agents: dict[int, str] | None = None) -> None:
        self._by_token: dict[str, int] = {}
        self._by_worker: dict[int, str] = {}
        self._agents: dict[int, str] = {}
        for worker, token in (initial or {}).items():
            self.set(worker, token, (agents or {}).get(worker))

    def set(self, worker: int, token: str, agent: str | None = None) -> None:
        """Make `token` worker's only token, for a worker of kind `agent`: its previous one is revoked."""
        old = self._by_worker.pop(worker, None)
        if old is not None:
            self._by_token.pop(old, None)
        self._by_worker[worker] = token
        self._by_token[token] = worker
        if agent is None:
            self._agents.pop(worker, None)
        else:
            self._agents[worker] = agent

    def agent(self, worker: int) -> str | None:
        """The kind worker's token was minted for (None: minted without one)."""
        return self._agents.get(worker)

    def worker(self, token: str) -> int | None:
        return self._by_token.get(token)

    def snapshot(self) -> dict[int, str]:
        return dict(self._by_worker)

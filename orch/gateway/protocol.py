"""What the gateway needs to know about a model API, so the server stays API-neutral.

One module per API implements ApiProtocol (orch/gateway/anthropic.py: the Messages API). The server asks
it which calls are billable, where the usage is in a JSON body or a stream, which tool calls a response
makes and which tool results a request carries, what an error the gateway itself returns looks like, and
how the user's credential goes upstream.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from orch.gateway.records import Scheme, Tokens

ErrorKind = Literal["authentication", "permission", "invalid_request", "upstream", "not_found"]


@dataclass(frozen=True)
class ToolUse:
    id: str
    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class ToolResult:
    tool_use_id: str
    is_error: bool
    text: str


@dataclass
class Outcome:
    """What a response told us: complete (a full body or the stream's end), its model, usage, tool calls."""

    complete: bool = False
    model: str | None = None
    usage: Tokens | None = None
    tool_uses: list[ToolUse] = field(default_factory=list)


class StreamReader(Protocol):
    def feed(self, event: dict[str, Any]) -> None:
        """One parsed SSE data object, in order."""

    def outcome(self) -> Outcome: ...


class ApiProtocol(Protocol):
    name: str

    def billable(self, method: str, path: str) -> bool:
        """A call the gateway counts, budgets, ledgers and replays by conversation (its body must be JSON)."""

    def kind(self, method: str, path: str) -> Literal["messages", "count_tokens", "other"]: ...

    def model(self, body: Mapping[str, Any]) -> str | None: ...

    def response_outcome(self, body: Mapping[str, Any]) -> Outcome:
        """A complete JSON response body's usage, model and tool calls."""

    def stream_reader(self, body: Mapping[str, Any]) -> StreamReader:
        """A reader for the streamed answer to this request."""

    def tool_results(self, body: Mapping[str, Any]) -> list[ToolResult]:
        """Every tool result the request carries (the server keeps the new ones)."""

    def error_body(self, kind: ErrorKind, message: str) -> dict[str, Any]: ...

    def upstream_auth(self, scheme: Scheme, secret: str, incoming: Mapping[str, str]) -> dict[str, str]:
        """The auth headers to send upstream (incoming: the worker's auth headers, used only by PASSTHROUGH)."""

    auth_headers: frozenset[str]
    """Incoming header names (lower case) that carry credentials: dropped before forwarding."""

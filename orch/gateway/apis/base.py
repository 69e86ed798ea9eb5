"""What the gateway needs to know about a model API, so the server, the recording and replay stay
API-neutral.

One module per API implements ApiProtocol (orch/gateway/apis/anthropic.py: the Messages API), registered in
orch/gateway/apis/registry.py. The live path asks it which calls are billable, where the usage is in a JSON
body or a stream, which tool calls a response makes and which tool results a request carries, what an
error the gateway itself returns looks like, and how the user's credential goes upstream. Replay asks it
how a request is keyed (`replay_parts`), how a recorded stream names this run's folders
(`translate_stream`) and what minimal answer a side call the recording never saw gets (`synthesised`).
The scripted model's side of each API is in orch/offline/, registered under the same name.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from orch.gateway.modeldir import Scheme, Tokens

ErrorKind = Literal["authentication", "permission", "invalid_request", "upstream", "not_found"]
CallKind = Literal["messages", "count_tokens", "other"]
ReplayKind = Literal["main", "side", "count_tokens", "other"]
Rewrite = Callable[[str], str]
"""A text rewrite (replay: the recording's folders become this run's)."""
REPLAY_TEXT = "Replayed session"
"""The text of every answer replay synthesises (`synthesised`), or of its strings where a schema is asked for."""


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


@dataclass(frozen=True)
class ReplayParts:
    """What replay keys a request by: main (the agent's own turns: they decide a replay), side (titles and
    the like), count_tokens or other; the raw text of the first message someone typed (normalised and
    digested into the conversation by orch.gateway.recording.keys); the turn (the request's number of messages
    or items)."""

    kind: ReplayKind
    first_text: str
    turn: int


@dataclass(frozen=True)
class Synthesised:
    """A minimal answer replay gives a side or count_tokens call its recording never saw."""

    content_type: str
    text: str
    stream: bool


class StreamReader(Protocol):
    def feed(self, event: dict[str, Any]) -> None:
        """One parsed SSE data object, in order."""

    def outcome(self) -> Outcome: ...


class StreamBase:
    """What every StreamReader shares: the Outcome its feed() fills as the stream goes."""

    def __init__(self) -> None:
        self._outcome = Outcome()

    def outcome(self) -> Outcome:
        return self._outcome


class ApiProtocol(Protocol):
    name: str

    def billable(self, method: str, path: str) -> bool:
        """A call the gateway counts, budgets, ledgers and replays by conversation (its body must be JSON)."""

    def kind(self, method: str, path: str) -> CallKind: ...

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

    def upstream_body(self, body: Mapping[str, Any], raw: bytes) -> bytes:
        """The request body to send upstream: `raw` as it came, unless the API needs a change (usage)."""

    def replay_parts(self, path: str, body: Mapping[str, Any]) -> ReplayParts:
        """How replay knows this request (`path` without its query and trailing slash)."""

    def translate_stream(self, text: str, rewrite: Rewrite) -> str:
        """A recorded stream with `rewrite` applied to its text and tool inputs; other lines byte for byte."""

    def synthesised(self, path: str, body: Mapping[str, Any], kind: ReplayKind, tag: str) -> Synthesised:
        """A minimal answer to a side or count_tokens call (`tag`: unique per key, for its id)."""


class ProtocolBase:
    """What most APIs share: the model named in the body, billable = not `other`, the body as it came, the
    worker's own auth headers passed through under PASSTHROUGH, else a bearer token (OpenAI's APIs)."""

    auth_headers: frozenset[str] = frozenset()

    def kind(self, method: str, path: str) -> CallKind:
        raise NotImplementedError

    def billable(self, method: str, path: str) -> bool:
        return self.kind(method, path) != "other"

    def model(self, body: Mapping[str, Any]) -> str | None:
        model = body.get("model")
        return model if isinstance(model, str) else None

    def upstream_body(self, body: Mapping[str, Any], raw: bytes) -> bytes:
        return raw

    def upstream_auth(self, scheme: Scheme, secret: str, incoming: Mapping[str, str]) -> dict[str, str]:
        if scheme is Scheme.PASSTHROUGH:
            return {k: v for k, v in incoming.items() if k in self.auth_headers}
        if scheme is Scheme.NONE:
            return {}
        return self.credential(scheme, secret, incoming)

    def credential(self, scheme: Scheme, secret: str, incoming: Mapping[str, str]) -> dict[str, str]:
        """The headers presenting the user's credential (API_KEY, BEARER or OAUTH)."""
        return {"authorization": f"Bearer {secret}"}


def count(value: object) -> int:
    """A token count, or 0 for anything that is not a non-negative int."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def cached_apart(usage: object, total: str, output: str) -> Tokens | None:
    """OpenAI's usage (`total` input tokens including `<total>_details.cached_tokens`, `output` tokens) as
    the books keep it: cached input apart."""
    if not isinstance(usage, dict):
        return None
    details = usage.get(f"{total}_details")
    cached = count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    total_in = count(usage.get(total))
    return Tokens(
        input_tokens=max(0, total_in - cached),
        output_tokens=count(usage.get(output)),
        cache_read_input_tokens=min(cached, total_in) if total_in else cached,
    )


def rewrite_value(value: Any, rewrite: Rewrite) -> Any:
    """`rewrite` applied to every string in a JSON value."""
    if isinstance(value, str):
        return rewrite(value)
    if isinstance(value, list):
        return [rewrite_value(v, rewrite) for v in value]
    if isinstance(value, dict):
        return {k: rewrite_value(v, rewrite) for k, v in value.items()}
    return value


def rewrite_json(text: str, rewrite: Rewrite) -> str | None:
    """A JSON text with `rewrite` applied to its strings; None when it is not JSON or nothing changed."""
    try:
        original = json.loads(text)
    except ValueError:
        return None
    rewritten = json.dumps(rewrite_value(original, rewrite))
    return rewritten if rewritten != json.dumps(original) else None

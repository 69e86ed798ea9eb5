"""What the model gateway writes to the run folder's `model/` dir and reads at boot: the contracts between
the gateway, the controller, the reports and replay.

The gateway is the only writer of `model/`; everything else reads it. Files:
- `usage.json`     UsageSnapshot, rewritten atomically after every exchange (exact usage and cost);
- `ledger.jsonl`   LedgerEntry lines: each tool call a worker's model asked for, and what came back;
- `gateway.jsonl`  GatewayEvent lines: tokens issued, budget refusals, rate limits, upstream faults;
- `budget.json`    GatewayBudget, the caps the controller set (kept so a restarted gateway enforces them);
- `exchanges-<n>.jsonl.gz`  Exchange lines of worker n, each line its own gzip member (a crash loses at
  most the exchange being written): the recording that `orch run --replay` answers from.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError

from orch.run.folder import RunFolder
from orch.run.records import Strict

log = logging.getLogger(__name__)


class Scheme(StrEnum):
    """How the gateway presents the user's credential upstream."""

    API_KEY = "x-api-key"
    BEARER = "bearer"
    OAUTH = "oauth"
    """A `claude setup-token` token: Authorization: Bearer plus the API's OAuth beta header."""
    PASSTHROUGH = "passthrough"
    """No credential in the gateway: the worker's own auth header goes upstream (a login file only the
    agent can refresh). Everything else (usage, budgets, ledger, recording) still holds."""
    NONE = "none"
    """The scripted upstream: no credential at all."""


class Upstream(Strict):
    kind: Literal["api", "scripted"] = "api"
    """`scripted`: the gateway starts orch's scripted model server itself and forwards to it."""
    url: str = ""
    """The API's base URL (kind api), e.g. https://api.anthropic.com."""
    scheme: Scheme = Scheme.NONE
    secret: SecretStr = SecretStr("")
    agents: list[str] = Field(default_factory=list)
    """The agent kinds whose workers it serves (a worker's token names its kind); empty: every worker."""
    protocols: list[str] = Field(default_factory=list)
    """The protocols (orch.gateway.apis.registry names) it serves; a request of another is refused, never
    forwarded with this credential. Empty: every protocol (the scripted model speaks them all)."""

    @property
    def name(self) -> str:
        """How events and `orch doctor` name it (never its secret)."""
        return "+".join(self.agents) or self.kind

    def serves(self, agent: str | None, protocol: str | None) -> bool:
        """Whether a worker of kind `agent` (None: unbound) may reach it with a call of `protocol` (None:
        a path no protocol claims)."""
        agent_ok = not self.agents or agent is None or agent in self.agents
        return agent_ok and (not self.protocols or protocol is None or protocol in self.protocols)


class GatewayBoot(Strict):
    """What starts a gateway: one JSON line on its stdin, so the credential never sits in an environment,
    a command line or a file."""

    run: str
    run_dir: str
    """The run folder; the gateway writes `model/` in it."""
    workdir: str = ""
    """The tree under audit (replay matching ignores where it lives)."""
    upstreams: list[Upstream] = Field(default_factory=list)
    """One per model API the run's agents need, each with its own credential: a request goes to the
    upstream of its worker's kind and its protocol, or nowhere. Empty only with `replay`."""
    replay: str | None = None
    """A cassette: a run folder (or a copy of one) whose `model/` recording answers every request."""
    control_key: SecretStr
    """The controller's key for the `/_orch/` control endpoints."""
    offline: bool = False
    """Nothing is billed (scripted upstream or replay): costs are priced but marked unbilled."""
    pricing: str | None = None
    """A pricing file overriding the shipped table."""
    listen: str = "127.0.0.1:0"
    upstream_stall: float = Field(default=600.0, gt=0)
    """Seconds the upstream may send nothing (before its headers or mid-stream) before the gateway cuts
    the request with an upstream-error event: a long generation streams for minutes, a stall is a fault."""


class Tokens(Strict):
    """The API's own usage fields."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    @property
    def total(self) -> int:
        """What the token caps count: every token the API reported, cached ones included."""
        return self.input_tokens + self.output_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


class UsageLine(Tokens):
    requests: int = 0
    cost_usd: float = 0.0


class WorkerUsage(UsageLine):
    by_model: dict[str, UsageLine] = Field(default_factory=dict)
    by_job: dict[str, UsageLine] = Field(default_factory=dict)
    """Keyed by the job the controller told the gateway the worker was on ("-": none)."""
    rate_limited_until: float | None = None
    """Epoch seconds: upstream said 429/529 (or a 5xx with retry-after) and when to retry."""
    retry_after: float | None = None
    """That answer's retry-after (seconds); None when it gave none (the until then assumes 30 s)."""
    refused: str | None = None
    """Why the gateway now refuses this worker's requests (its budget), None while it serves it."""


class UsageSnapshot(Strict):
    offline: bool
    billed: bool
    """False for offline and replayed runs: costs are what the table prices, nothing was charged."""
    pricing: str
    """Where the prices came from (the shipped table or the user's file)."""
    updated: float
    workers: dict[int, WorkerUsage] = Field(default_factory=dict)
    total: UsageLine = Field(default_factory=UsageLine)
    refused: str | None = None
    """Why the gateway refuses every request (the fleet's budget)."""


class GatewayBudget(Strict):
    max_cost_usd: float | None = None
    max_cost_per_worker_usd: float | None = None
    max_tokens: int | None = None
    max_tokens_per_worker: int | None = None


class LedgerEntry(Strict):
    ts: float
    worker: int
    job: str | None = None
    seq: int
    """The exchange it came from (per gateway life; `ts` orders across lives)."""
    kind: Literal["tool_use", "tool_result"]
    id: str
    """The tool_use id; a tool_result carries the id of the call it answers."""
    tool: str | None = None
    input: dict[str, Any] | None = None
    is_error: bool | None = None
    output: str | None = None
    """The result's text, shortened."""


class GatewayEventKind(StrEnum):
    STARTED = "started"
    TOKEN_ISSUED = "token-issued"
    BAD_TOKEN = "bad-token"
    MALFORMED_REQUEST = "malformed-request"
    BUDGET_EXCEEDED = "budget-exceeded"
    RATE_LIMITED = "rate-limited"
    UPSTREAM_ERROR = "upstream-error"
    REPLAY_MISS = "replay-miss"
    NO_UPSTREAM = "no-upstream"
    """A call no upstream of the worker serves (another model API's path): refused, never forwarded."""
    CREDENTIAL_FALLBACK = "credential-fallback"
    NO_PRICE = "no-price"
    """A model the pricing table has no price for (once per model and gateway life): its cost counts as 0."""


class GatewayEvent(Strict):
    ts: float
    event: GatewayEventKind
    worker: int | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class ExchangeKey(Strict):
    """How replay finds a request's recording: by worker, conversation and turn, never the whole body."""

    kind: Literal["main", "side", "count_tokens", "other"]
    conversation: str
    """A digest of the conversation's first user message, normalised (system reminders, ids, run paths)."""
    turn: int
    """Messages in the request."""


class Exchange(Strict):
    seq: int
    ts: float
    worker: int
    job: str | None = None
    method: str
    path: str
    request: dict[str, Any]
    """The request body (JSON). Headers are not kept: they carry credentials."""
    status: int
    headers: dict[str, str] = Field(default_factory=dict)
    """The response headers replay needs (content-type, retry-after, x-should-retry, request-id)."""
    stream: bool
    body: str
    """The response as it came: the SSE text of a stream, or the JSON text."""
    key: ExchangeKey


def unbilled(billed: bool | None, offline: bool, replayed: bool) -> str | None:
    """Why a run's costs were charged to nobody (offline, replayed), in words to show beside the cost; None when a
    model API charged them (`billed`, the gateway's word), or may have (a live run without a gateway)."""
    if billed or not (offline or replayed or billed is False):
        return None
    return "replayed a recording" if replayed else "offline: orch's scripted model answered"


NO_TRAFFIC = "no model traffic"


def run_cost(
    usage: UsageSnapshot | None, workers: Iterable[float | None], offline: bool, replayed: bool
) -> tuple[float | None, str | None]:
    """A run's cost as `orch status` and `orch watch` show it, and why nothing was billed (`unbilled`): the
    gateway's count, else what the workers' own status lines say; before any model traffic (the gateway writes
    usage.json after its first exchange, and no status line counted anything) $0, and that said."""
    if usage is not None:
        return usage.total.cost_usd, unbilled(usage.billed, offline, replayed)
    known = [cost for cost in workers if cost is not None]
    if not known:
        return 0.0, NO_TRAFFIC
    return sum(known), unbilled(None, offline, replayed)


def read_usage(run: RunFolder) -> UsageSnapshot | None:
    """The gateway's usage.json (rewritten atomically, so never half-written), or None without one."""
    try:
        return UsageSnapshot.model_validate_json(run.model_usage.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValidationError) as exc:  # another orch version's file: report it as absent
        log.warning("%s is unreadable: %s", run.model_usage, exc)
        return None

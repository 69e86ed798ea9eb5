"""Which upstream a run's gateway forwards to, and with which of the user's credentials.

Decided on the host (or wherever the run is started), from the agent's Credentials facts and the user's
environment. The secret leaves this function only inside the Upstream, which travels to the gateway on its
stdin (orch.gateway.process) and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from orch.contracts import Credentials
from orch.gateway.records import Scheme, Upstream

FALLBACK_WARNING = (
    "the only credential is the agent's own login file ({path}): its OAuth token rotates and only the agent "
    "can refresh it, so each worker keeps a copy and the gateway passes the worker's own login upstream "
    "(usage, budgets, ledger and recording still go through the gateway). Set an API key or a "
    "`claude setup-token` token so that no worker holds a credential."
)


NO_CREDENTIAL_WARNING = "no credential for the model API: every model call of the run will be refused ({hint})"


@dataclass(frozen=True)
class UpstreamChoice:
    upstream: Upstream
    warning: str | None = None
    """Set when the gateway cannot hold a credential: PASSTHROUGH, or none at all."""
    login_file: Path | None = None
    """The login file the workers must be given (PASSTHROUGH only)."""


def upstream_for(
    credentials: Credentials, env: Mapping[str, str], offline: bool, home: Path | None = None
) -> UpstreamChoice:
    """The scripted model for offline runs; else the first credential set in `env` (its scheme from the
    agent's facts) sent to the user's own base URL or the agent's API; else the agent's login file, passed
    through with a warning; else nothing, with a warning."""
    if offline:
        return UpstreamChoice(Upstream(kind="scripted"))
    base = env.get(credentials.base_url_env, "").strip() if credentials.base_url_env else ""
    url = base or credentials.api_url or ""
    schemes = dict(credentials.schemes)
    for var in credentials.env:
        if env.get(var):
            scheme = Scheme(schemes.get(var, Scheme.API_KEY.value))
            return UpstreamChoice(Upstream(kind="api", url=url, scheme=scheme, secret=SecretStr(env[var])))
    login = credentials.login_file(env, home)
    if login is not None:
        upstream = Upstream(kind="api", url=url, scheme=Scheme.PASSTHROUGH)
        return UpstreamChoice(upstream, FALLBACK_WARNING.format(path=login), login)
    # No credential: the fleet still starts (an agent that calls no model needs none), and the API
    # refuses each call itself, which the agent shows as a login error.
    return UpstreamChoice(
        Upstream(kind="api", url=url, scheme=Scheme.NONE), NO_CREDENTIAL_WARNING.format(hint=credentials.hint)
    )

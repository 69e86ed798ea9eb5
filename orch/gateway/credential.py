"""Which upstreams a run's gateway forwards to, and with which of the user's credentials: one per model
API the fleet's agents need (agents that share a credential and endpoint share an upstream).

Decided on the host (or wherever the run is started), from the agents' Credentials facts and the user's
environment. A secret leaves these functions only inside an Upstream, which travels to the gateway on its
stdin (orch.gateway.process) and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import SecretStr

from orch.errors import UsageError
from orch.gateway.modeldir import Scheme, Upstream
from orch.modelaccess import Credentials

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


@dataclass(frozen=True)
class FleetUpstreams:
    """The upstreams of a run's gateway, for every agent kind of its fleet."""

    upstreams: tuple[Upstream, ...]
    warning: str | None = None
    """Set when the gateway cannot hold a credential (a fleet of one model API only)."""
    login_file: Path | None = None
    """The login file the workers must be given (PASSTHROUGH, a fleet of one model API only)."""
    variables: dict[str, str] = field(default_factory=dict)
    """Upstream name -> the variable its credential came from (what `orch doctor` shows; never a value)."""

    @property
    def scheme(self) -> Scheme:
        """How the credential goes upstream: the one scheme, PASSTHROUGH or NONE of a one-upstream fleet;
        for several, the first's (they all hold a credential)."""
        return self.upstreams[0].scheme if self.upstreams else Scheme.NONE

    @property
    def schemes(self) -> str:
        """What run.json's `credential` says: the schemes of the upstreams, comma-separated."""
        return ",".join(dict.fromkeys(u.scheme.value for u in self.upstreams)) or Scheme.NONE.value


def _variable(credentials: Credentials, env: Mapping[str, str]) -> str | None:
    return next((var for var in credentials.env if env.get(var)), None)


def fleet_upstreams(
    kinds: Mapping[str, Credentials],
    env: Mapping[str, str],
    offline: bool,
    home: Path | None = None,
    strict: bool = True,
) -> FleetUpstreams:
    """One upstream per model API of the fleet (`kinds`: agent kind -> its Credentials, in fleet order).

    Offline: the scripted model for every kind. Agents whose credential resolves to the same endpoint,
    scheme and secret share an upstream, which serves their protocols. A fleet of one upstream keeps the
    fallbacks of `upstream_for` (the login file passed through, or no credential with a warning); a fleet
    across several model APIs needs a credential the gateway holds for each, else UsageError naming the
    missing variables (nothing is started); `strict=False` (`orch doctor`) returns them as they are."""
    if offline:
        return FleetUpstreams((Upstream(kind="scripted"),))
    groups: dict[tuple[str, str, str], tuple[Upstream, UpstreamChoice, str | None]] = {}
    for kind, credentials in kinds.items():
        if not credentials.env:
            continue  # an agent that calls no model API
        choice = upstream_for(credentials, env, offline=False, home=home)
        up = choice.upstream
        key = (up.url, up.scheme.value, up.secret.get_secret_value())
        if key in groups:
            first, first_choice, var = groups[key]
            merged = first.model_copy(
                update={
                    "agents": [*first.agents, kind],
                    "protocols": list(dict.fromkeys([*first.protocols, *credentials.protocols])),
                }
            )
            groups[key] = (merged, first_choice, var)
        else:
            bound = up.model_copy(update={"agents": [kind], "protocols": list(credentials.protocols)})
            groups[key] = (bound, choice, _variable(credentials, env))
    if not groups:
        return FleetUpstreams(())
    found = list(groups.values())
    variables = {up.name: var for up, _, var in found if var}
    if len(found) == 1:
        up, choice, _ = found[0]
        return FleetUpstreams((up,), choice.warning, choice.login_file, variables)
    missing = [kind for kind, credentials in kinds.items() if credentials.env and not credentials.in_env(env)]
    if missing and strict:
        names = "; ".join(f"{kind}: {' or '.join(kinds[kind].env)}" for kind in missing)
        raise UsageError(
            f"no credential for {len(missing)} of the fleet's model APIs ({names}): a fleet across model APIs "
            "needs a key the gateway holds for each",
            hint=" ; ".join(kinds[kind].hint for kind in missing if kinds[kind].hint) or None,
        )
    return FleetUpstreams(tuple(up for up, _, _ in found), variables=variables)

"""`orch doctor`: what this machine has, and the fix for what it lacks."""

from __future__ import annotations

import os

from orch.agents.registry import ADAPTERS, get_adapter
from orch.backends import registry as backends
from orch.contracts import Check
from orch.gateway.credential import fleet_upstreams
from orch.gateway.modeldir import Scheme


def _backends() -> list[Check]:
    """Each registered backend (orch.backends.registry): a line saying where its runs live, then what it needs
    here, and the fix for what is missing."""
    checks = []
    for name in backends.names():
        backend = backends.get_backend(name)
        checks += [Check("backend", True, f"{name}: {backend.about}"), *backend.doctor()]
    return checks


def _agents() -> list[Check]:
    return [check for name in sorted(ADAPTERS) for check in get_adapter(name).doctor()]


def upstream_checks(fleet: list[str] | None) -> list[Check]:
    """One line per upstream the run's gateway would hold for the fleet (default: every agent that calls a
    model API): which agents share it, where it goes, the variable it takes its credential from and how it
    is sent (never a value). For a given fleet (`--agents`), a model API it has no credential for is a
    failure: its every call would be refused (across model APIs `orch up` refuses the fleet); an agent's login
    file passed through counts for a fleet of one model API."""
    kinds = fleet or sorted(name for name in ADAPTERS if get_adapter(name).facts.credentials.env and name != "scripted")
    found = fleet_upstreams({k: get_adapter(k).facts.credentials for k in kinds}, os.environ, False, strict=False)
    required = fleet is not None
    checks = []
    for upstream in found.upstreams:
        protocols = ", ".join(upstream.protocols) or "any API"
        where = f"{upstream.name} -> {upstream.url or '(no URL)'} ({protocols})"
        variable = found.variables.get(upstream.name)
        if variable is not None:
            checks.append(Check("upstream", True, f"{where}: {variable}, sent as {upstream.scheme.value}"))
            continue
        names = sorted({var for agent in upstream.agents for var in get_adapter(agent).facts.credentials.env})
        hint = get_adapter(upstream.agents[0]).facts.credentials.hint if upstream.agents else None
        if upstream.scheme is Scheme.PASSTHROUGH and (fleet is None or len(found.upstreams) == 1):
            checks.append(Check("upstream", True, f"{where}: the agent's login file, passed through", hint))
            continue
        detail = f"{where}: no credential ({' or '.join(names)} unset)"
        checks.append(Check("upstream", False, detail, hint, optional=not required))
    return checks


def run_checks(fleet: list[str] | None = None) -> list[Check]:
    """Every check; `fleet` (agent kinds) narrows the gateway's upstream lines to that fleet's."""
    return [*_backends(), *_agents(), *upstream_checks(fleet)]

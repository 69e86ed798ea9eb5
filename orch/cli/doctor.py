"""`orch doctor`: what this machine has, and the fix for what it lacks."""

from __future__ import annotations

import os

from orch import prereqs
from orch.agents.registry import ADAPTERS, get_adapter
from orch.contracts import Check
from orch.errors import OrchError
from orch.fleet.tmux import check_tmux
from orch.gateway.credential import fleet_upstreams
from orch.gateway.modeldir import Scheme
from orch.versions import TMUX_MIN_VERSION


def _tmux() -> Check:
    try:
        return Check("tmux", True, check_tmux())
    except OrchError as exc:
        need = ".".join(map(str, TMUX_MIN_VERSION))
        return Check("tmux", False, exc.message, exc.hint or f"install tmux >= {need}")


def _bwrap() -> Check:
    """Local strict isolation (the default of a local run): bubblewrap, and the namespaces it needs."""
    try:
        return Check("bubblewrap", True, prereqs.bwrap_works())
    except OrchError as exc:
        return Check("bubblewrap", False, exc.message, exc.hint)


def _agents() -> list[Check]:
    return [check for name in sorted(ADAPTERS) for check in get_adapter(name).doctor()]


def _docker() -> list[Check]:
    try:
        from orch.backends.docker.engine import docker_client, engine_address
        from orch.backends.docker.image import image_exists
        from orch.backends.docker.sandbox import default_image

        client = docker_client()
        version = client.version().get("Version", "?")
    except OrchError as exc:
        return [Check("docker", False, exc.message, exc.hint, optional=True)]
    checks = [Check("docker", True, f"engine {version} at {engine_address()}", optional=True)]
    image = default_image()
    try:
        found = image_exists(image)
    except OrchError as exc:
        return [*checks, Check("image", False, exc.message, exc.hint, optional=True)]
    fix = "orch image build (add --base-image IMAGE where no registry is reachable)"
    checks.append(Check("image", found, image if found else f"{image} not built", None if found else fix, True))
    from orch.backends.swarm.cluster import doctor_checks

    return [*checks, *doctor_checks(client, engine_address())]


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
    return [_tmux(), _bwrap(), *_agents(), *upstream_checks(fleet), *_docker()]

"""`orch doctor`: what this machine has, and the fix for what it lacks."""

from __future__ import annotations

import os
from dataclasses import dataclass

from orch.agents import ADAPTERS, get_adapter
from orch.agents.claude import CREDENTIAL_ENV, user_credentials_file
from orch.errors import OrchError
from orch.fleet.tmux import check_tmux
from orch.versions import TMUX_MIN_VERSION


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str | None = None
    optional: bool = False


def _tmux() -> Check:
    try:
        return Check("tmux", True, check_tmux())
    except OrchError as exc:
        need = ".".join(map(str, TMUX_MIN_VERSION))
        return Check("tmux", False, exc.message, exc.hint or f"install tmux >= {need}")


def _agents() -> list[Check]:
    checks = []
    for name in sorted(ADAPTERS):
        if name == "scripted":
            continue
        adapter = get_adapter(name)
        try:
            path = adapter.binary()
        except OrchError as exc:
            checks.append(Check(name, False, exc.message, exc.hint))
            continue
        version = adapter.version()
        checks.append(Check(name, version is not None, f"{version or 'version unknown'} at {path}"))
    return checks


def _docker() -> list[Check]:
    try:
        from orch.container.engine import docker_client, engine_address
        from orch.container.image import image_exists
        from orch.container.sandbox import default_image

        version = docker_client().version().get("Version", "?")
    except OrchError as exc:
        return [Check("docker", False, exc.message, exc.hint, optional=True)]
    checks = [Check("docker", True, f"engine {version} at {engine_address()}", optional=True)]
    image = default_image()
    try:
        found = image_exists(image)
    except OrchError as exc:
        return [*checks, Check("image", False, exc.message, exc.hint, optional=True)]
    fix = "orch image build (add --base IMAGE where no registry is reachable)"
    checks.append(Check("image", found, image if found else f"{image} not built", None if found else fix, True))
    return checks


def _credentials() -> Check:
    found = [k for k in CREDENTIAL_ENV if os.environ.get(k)]
    creds_file = user_credentials_file()
    if creds_file:
        found.append(str(creds_file))
    if os.environ.get("ANTHROPIC_BASE_URL"):
        found.append(f"ANTHROPIC_BASE_URL={os.environ['ANTHROPIC_BASE_URL']}")
    if found:
        return Check("credentials", True, ", ".join(found))
    return Check(
        "credentials",
        False,
        "none found (the offline demo needs none)",
        "export ANTHROPIC_API_KEY=... or CLAUDE_CODE_OAUTH_TOKEN=... (from `claude setup-token`)",
        optional=True,
    )


def run_checks() -> list[Check]:
    return [_tmux(), *_agents(), *_docker(), _credentials()]

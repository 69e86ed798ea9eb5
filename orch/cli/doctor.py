"""`orch doctor`: what this machine has, and the fix for what it lacks."""

from __future__ import annotations

from orch.agents.registry import ADAPTERS, get_adapter
from orch.contracts import Check
from orch.errors import OrchError
from orch.fleet.tmux import check_tmux
from orch.versions import TMUX_MIN_VERSION


def _tmux() -> Check:
    try:
        return Check("tmux", True, check_tmux())
    except OrchError as exc:
        need = ".".join(map(str, TMUX_MIN_VERSION))
        return Check("tmux", False, exc.message, exc.hint or f"install tmux >= {need}")


def _agents() -> list[Check]:
    return [check for name in sorted(ADAPTERS) for check in get_adapter(name).doctor()]


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


def run_checks() -> list[Check]:
    return [_tmux(), *_agents(), *_docker()]

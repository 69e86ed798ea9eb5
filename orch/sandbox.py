"""Where a run executes: this machine (`local`) or its own container (`docker`).

The fleet code (orch.fleet) always runs next to the run's tmux server. For a containerised run the
host CLI forwards tmux-touching commands into the container; file-only commands (wait, bus) read the
mounted run folder directly.
"""

from __future__ import annotations

import os

from pydantic import TypeAdapter

from orch import fleet
from orch.contracts import Sandbox, UpRequest
from orch.models import Backend, RunInfo, RunStatusView
from orch.workspace import RunFolder


def in_container() -> bool:
    """True inside a run's container, where the controller and tmux live."""
    return os.environ.get("ORCH_IN_CONTAINER") == "1"


def docker_sandbox() -> Sandbox:
    from orch.docker_sandbox import DockerSandbox

    return DockerSandbox()


def is_remote(info: RunInfo) -> bool:
    return info.backend is Backend.DOCKER and not in_container()


def up_with_backend(req: UpRequest, backend: Backend, boot_timeout: float) -> RunInfo:
    if backend is Backend.LOCAL or in_container():
        return fleet.up(req, backend=backend, boot_timeout=boot_timeout)
    return docker_sandbox().up(req)


def forward(run: RunFolder, args: list[str], stdin: str | None = None, interactive: bool = False) -> int | None:
    """Run `orch ARGS` inside the run's container; None when the run is local (do it here)."""
    info = run.info()
    if not is_remote(info):
        return None
    return docker_sandbox().forward(info, args, stdin=stdin, interactive=interactive)


def status_of(run: RunFolder) -> RunStatusView:
    info = run.info()
    if not is_remote(info):
        return fleet.status(run)
    sandbox = docker_sandbox()
    if not sandbox.alive(info):
        return fleet.status_view(run, info, panes=None, why_down="container not running")
    views = TypeAdapter(list[RunStatusView]).validate_json(sandbox.capture(info, ["status", info.name, "--json"]))
    return views[0]


def kill_run(run: RunFolder) -> None:
    info = run.info()
    if is_remote(info):
        docker_sandbox().kill(info)
    else:
        fleet.kill(run)

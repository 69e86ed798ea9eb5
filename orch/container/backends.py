"""Where a run executes: this machine (`local`) or its own container (`docker`).

The fleet code (orch.fleet) always runs next to the run's tmux server. For a containerised run the
host CLI forwards tmux-touching commands into the container; file-only commands (wait, bus) read the
mounted run folder directly, except on a remote engine, where the folder lives over there.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import TypeAdapter

from orch.errors import OrchError, UsageError
from orch.run.folder import RunFolder
from orch.run.records import Backend, RunInfo, RunStatus, RunStatusView
from orch.settings import IN_CONTAINER

if TYPE_CHECKING:
    from orch.container.sandbox import DockerSandbox, DockerSettings
    from orch.contracts import UpRequest

# orch.fleet (tmux, the agents) is imported where it is used: `orch bus post`, run by workers many
# times, comes through here only to ask on_remote_engine and must not pay for it.

# Commands that read the run folder when the container is gone (transcripts are evidence).
READS_FOLDER_WHEN_DOWN = ("read",)


def in_container() -> bool:
    """True inside a run's container, where the controller and tmux live."""
    return IN_CONTAINER.get()


def docker_sandbox(settings: DockerSettings | None = None) -> DockerSandbox:
    from orch.container.sandbox import DockerSandbox

    return DockerSandbox(settings)


def is_remote(info: RunInfo) -> bool:
    """The run's tmux server is not on this machine: it is in the run's container."""
    return info.backend is Backend.DOCKER and not in_container()


def on_remote_engine(info: RunInfo) -> bool:
    """The run folder is on another machine (a remote engine's volume): even file reads go there."""
    return is_remote(info) and info.container is not None and info.container.remote


def up_with_backend(
    req: UpRequest, backend: Backend, boot_timeout: float, docker: DockerSettings | None = None
) -> RunInfo:
    from orch.fleet import launch

    if backend is Backend.LOCAL or in_container():
        return launch.up(req, backend=backend, boot_timeout=boot_timeout)
    return docker_sandbox(docker).up(req)


def resume(name: str, boot_timeout: float, docker: DockerSettings | None = None) -> RunInfo:
    """`orch up NAME --resume`: relaunch a run whose tmux server or container died, on the same folder."""
    from orch.agents import get_adapter
    from orch.fleet import launch

    run = RunFolder.for_name(name)
    info = run.info()
    if is_remote(info):
        return docker_sandbox(docker).resume(name)
    if launch.server_for(info).alive():
        raise UsageError(f"run {name!r} is still running", hint=f"orch kill {name} first to restart it")
    info.status = RunStatus.STARTING
    run.write_info(info)
    launch.launch(run, info, get_adapter(info.agent), {}, boot_timeout, resume=True)
    return run.info()


def forward(run: RunFolder, args: list[str], stdin: str | None = None, interactive: bool = False) -> int | None:
    """Run `orch ARGS` inside the run's container; None when it is to be done here.

    Here means: a local run, or a read-only command on a container run that is down while its folder
    is on this machine (the transcripts answer it).
    """
    info = run.info()
    if not is_remote(info):
        return None
    sandbox = docker_sandbox()
    if args[0] in READS_FOLDER_WHEN_DOWN and not on_remote_engine(info) and not sandbox.alive(info):
        return None
    return sandbox.forward(info, args, stdin=stdin, interactive=interactive)


def forward_if_remote_engine(run: RunFolder, args: list[str], stdin: str | None = None) -> int | None:
    """For file-only commands (wait, bus): forward only when the folder is on a remote engine."""
    info = run.info()
    if not on_remote_engine(info):
        return None
    return docker_sandbox().forward(info, args, stdin=stdin)


def status_of(run: RunFolder) -> RunStatusView:
    from orch.fleet import watch

    info = run.info()
    if not is_remote(info):
        return watch.status(run)
    sandbox = docker_sandbox()
    try:
        state = sandbox.state(info)
        alive = state == "running"
        why = None if alive else f"container {state}"
    except OrchError as exc:
        alive, why = False, f"engine unreachable: {exc.message}"
    if not alive:
        return watch.status_view(run, info, panes=None, why_down=why)
    views = TypeAdapter(list[RunStatusView]).validate_json(sandbox.capture(info, ["status", info.name, "--json"]))
    return views[0]


def container_state(info: RunInfo) -> str:
    """For `orch ls`: the state of a docker run's container ("-" for local runs)."""
    if not is_remote(info):
        return "-"
    try:
        return docker_sandbox().state(info)
    except OrchError:
        return "engine unreachable"


def kill_run(run: RunFolder) -> None:
    from orch.fleet import watch

    info = run.info()
    if is_remote(info):
        docker_sandbox().kill(info)
    else:
        watch.kill(run)


def pull(run: RunFolder) -> RunInfo:
    info = run.info()
    if not on_remote_engine(info):
        return info
    return docker_sandbox().pull(info)


def push(run: RunFolder, files: list[Path]) -> None:
    """Files written into the local run folder that the run's container must see (a remote engine's volume
    is not this folder; a local one is, through its bind mount)."""
    info = run.info()
    if on_remote_engine(info):
        docker_sandbox().push(info, files)

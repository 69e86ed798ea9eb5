"""Which sandbox a run has, seen from this process: the one place that asks where a run lives.

The fleet code (orch.fleet) always runs next to the run's tmux server: on this machine for a local run
and, inside a run's container, for that container's run (`LocalSandbox`); from the host, a container
run's tmux server is in its container (`DockerSandbox`). Two words, one meaning each: `in_container`
(this process runs inside a run's container) and `on_remote_engine` (a container run whose engine, and so
whose run folder, is on another machine).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orch.run.records import Backend, DockerRunInfo, RunInfo
from orch.settings import IN_CONTAINER

if TYPE_CHECKING:
    from orch.backends.docker.sandbox import DockerSettings
    from orch.contracts import OrchCommand, Sandbox

# The sandboxes are imported where they are chosen: `orch bus post`, run by workers many times, comes
# through here only for folder_is_here and must not pay for tmux, docker, the fleet code or the contracts.


def in_container() -> bool:
    """True inside a run's container, where the controller and tmux live."""
    return IN_CONTAINER.get()


def sandbox_for_backend(
    backend: Backend, boot_timeout: float | None = None, docker: DockerSettings | None = None
) -> Sandbox:
    """The sandbox that starts a new run on `backend`; inside a run's container every fleet is local.

    `boot_timeout`: how long up and resume wait for the workers (None: the default); `docker` replaces it
    for a container run.
    """
    if backend is Backend.DOCKER and not in_container():
        from orch.backends.docker.sandbox import DockerSandbox, DockerSettings

        if docker is None and boot_timeout is not None:
            docker = DockerSettings(boot_timeout=boot_timeout)
        return DockerSandbox(docker)
    from orch.backends.local.sandbox import LocalSandbox

    return LocalSandbox() if boot_timeout is None else LocalSandbox(boot_timeout)


def sandbox_for(info: RunInfo, boot_timeout: float | None = None, docker: DockerSettings | None = None) -> Sandbox:
    """The sandbox where the run's tmux server lives."""
    return sandbox_for_backend(info.backend, boot_timeout, docker)


def folder_is_here(info: RunInfo) -> bool:
    """The run folder on this machine is the one the fleet writes, not a copy of one on a remote engine."""
    return not (isinstance(info, DockerRunInfo) and info.container.on_remote_engine and not in_container())


def at_folder(info: RunInfo, command: OrchCommand) -> int:
    """Run a command that only reads or appends run-folder files (wait, bus) where that folder lives."""
    if folder_is_here(info):
        return command.run_here()
    return sandbox_for(info).forward(info, command)

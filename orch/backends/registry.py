"""Backends, chosen by name: the one place that knows which exist and which one a run has.

The fleet code (orch.fleet) always runs next to the run's tmux server: on this machine for a local run and,
inside a run's container, for that container's run (the local sandbox); from the host, a container run's tmux
server is in its container (the docker sandbox). Two words, one meaning each: `here()` is the backend this
process runs in (docker inside a run's container, else local) and `on_remote_engine` a container run whose
engine, and so whose run folder, is on another machine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from orch.errors import UsageError
from orch.run.records import RECORD_FINDERS, RUN_RECORDS, RunInfo

if TYPE_CHECKING:
    from orch.backends.base import Backend, BackendSettings, UpOptions
    from orch.contracts import OrchCommand, Sandbox
    from orch.fleet.confinement import Confinement

# The backends' modules are imported when one is asked for: `orch bus post`, run by workers many times, comes
# through here only for folder_is_here and must not pay for tmux, docker, the fleet code or the contracts.

BACKENDS: dict[str, str | Backend] = {
    "local": "orch.backends.local.backend:LocalBackend",
    "docker": "orch.backends.docker.backend:DockerBackend",
    "swarm": "orch.backends.swarm.backend:SwarmBackend",
}
"""Every backend by name: `module:Class` (imported on first use), or a backend itself (a test's toy backend).
Adding a backend is its package and one line here."""
DEFAULT = "docker"
"""The backend a new run gets from a host when none is named (`--backend`); inside a run's container, local."""

_loaded: dict[str, Backend] = {}


def get_backend(name: str) -> Backend:
    """The backend of this name; UsageError (one line, listing the backends there are) for an unknown one."""
    try:
        target = BACKENDS[name]
    except KeyError:
        raise UsageError(f"unknown backend {name!r} (available: {', '.join(sorted(BACKENDS))})") from None
    if not isinstance(target, str):
        backend = target
    elif (backend := _loaded.get(target)) is None:  # type: ignore[assignment]  # mypy: the walrus over a union
        module, _, attr = target.partition(":")
        backend = getattr(importlib.import_module(module), attr)()
        _loaded[target] = backend
    RUN_RECORDS.setdefault(backend.name, backend.record)  # a backend's own variant of run.json, read from now on
    return backend


def _find_record(name: str) -> None:
    if name in BACKENDS:
        get_backend(name)


RECORD_FINDERS.append(_find_record)


def names() -> list[str]:
    """The backends' names, as registered."""
    return list(BACKENDS)


def backend_of(info: RunInfo) -> Backend:
    """The backend a run lives on."""
    return get_backend(info.backend)


def confinement_of(info: RunInfo) -> Confinement:
    """How the run's workers are kept apart, as its backend says, for its fleet in this process."""
    return backend_of(info).confinement(info)


def here() -> Backend:
    """The backend this process runs in: inside a run's container the docker backend, whose facts hold here
    (a gateway keeper, the checks' uid); else the local one."""
    from orch.backends.base import in_container

    return get_backend("docker" if in_container() else "local")


def chosen(name: str | None, local: bool = False) -> Backend:
    """The backend `--backend NAME` (or `--local`) picks for a new run; neither: DEFAULT, or inside a run's
    container the local one (every fleet there is local to it)."""
    if local and name not in (None, "local"):
        raise UsageError(f"--local and --backend {name} disagree", hint="give one of them")
    if local:
        return get_backend("local")
    if name is not None:
        return get_backend(name)
    return get_backend("local" if here().container else DEFAULT)


def sandbox_for(info: RunInfo, boot_timeout: float | None = None) -> Sandbox:
    """The sandbox where the run's tmux server lives; `boot_timeout`: how long a resume waits for the workers
    (None: the default)."""
    return start_sandbox(backend_of(info), boot_timeout)


def start_sandbox(
    backend: Backend, boot_timeout: float | None = None, settings: BackendSettings | None = None
) -> Sandbox:
    """The backend's sandbox with these settings (None: its defaults, with `boot_timeout` if given)."""
    if settings is None and boot_timeout is not None:
        settings = backend.settings(_options(boot_timeout))
    return backend.sandbox(settings)


def _options(boot_timeout: float) -> UpOptions:
    from orch.backends.base import UpOptions

    return UpOptions(boot_timeout=boot_timeout)


def folder_is_here(info: RunInfo) -> bool:
    """The run folder on this machine is the one the fleet writes, not a copy of one elsewhere."""
    return backend_of(info).folder_is_here(info)


def at_folder(info: RunInfo, command: OrchCommand) -> int:
    """Run a command that only reads or appends run-folder files (wait, bus) where that folder lives."""
    if folder_is_here(info):
        return command.run_here()
    return sandbox_for(info).forward(info, command)

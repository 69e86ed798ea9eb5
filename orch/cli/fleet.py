"""Fleet commands that start a fleet and its agents: up/spawn, restart (orch.cli.talk: send and brief; orch.cli.runs:
the rest)."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from orch.agents.registry import DEFAULT_AGENT
from orch.backends import registry as backends
from orch.backends.base import Backend
from orch.cli.common import (
    BackendOpt,
    ConstraintOpt,
    CopyOpt,
    LocalOpt,
    NameArg,
    OfflineOpt,
    PerNodeOpt,
    ReplaceOpt,
    WorkerArg,
    at_fleet,
    parse_agents,
    placement,
    run_folder,
)
from orch.cli.container import (
    AllowOpt,
    ContainerOpts,
    CpusOpt,
    EgressOpt,
    ImageOpt,
    MemoryOpt,
    NetworkOpt,
    PidsOpt,
)
from orch.cli.notify import NotifyOpt, effective, start_detached
from orch.contracts import OrchCommand, UpRequest
from orch.errors import SandboxError, UsageError, WaitTimeoutError
from orch.fleet import launch
from orch.fleet.booting import BOOT_TIMEOUT
from orch.notify.config import NotifyConfig
from orch.run.folder import RunFolder
from orch.run.records import Isolation, WorkerCaps
from orch.settings.limits import (
    CONTAINER_MEMORY,
    CONTAINER_PIDS,
    RUN_FOLDER_MAX,
    WORKER_DISK,
    WORKER_MEMORY,
    WORKER_PIDS,
)

app = typer.Typer()  # joined into the `orch` app by orch.cli.commands


def _up(
    name: str,
    workers: int,
    agent: str,
    workdir: Path,
    where: Backend,
    permission_mode: str | None,
    model: str | None,
    replace: bool,
    boot_timeout: float,
    offline: bool = False,
    container: ContainerOpts | None = None,
    resume: bool = False,
    isolation: Isolation | None = None,
    mixed: str | None = None,
    caps: WorkerCaps | None = None,
    notify: list[str] | None = None,
) -> None:
    options = (container or ContainerOpts()).options(boot_timeout)
    told = effective(None, notify)  # a bad target, or a webhook's variable unset: one line, nothing started
    started = time.time()
    if resume:
        info = backends.sandbox_for(run_folder(name).info(), boot_timeout).resume(name)
        typer.echo(f"run {info.name}: resumed ({info.backend}); folder {RunFolder.for_name(name).root}")
        _notifier(RunFolder.for_name(name), told, started)
        return
    settings = where.settings(options)  # bad options: one line, before anything
    agents = parse_agents(mixed) if mixed else {}  # a mixed fleet: its size and first agent from --agents
    req = UpRequest(
        name=name, workers=len(agents) or workers, agent=agents.get(1, agent), worker_agents=agents, workdir=workdir,
        permission_mode=permission_mode, model=model, replace=replace, offline=offline, caps=caps or WorkerCaps(),
    )  # fmt: skip
    note = None
    if isolation is None:  # strict, here as in a container, unless an agent (or this container) cannot
        isolation, note = where.default_isolation({req.agent, *req.worker_agents.values()})
    elif isolation is Isolation.SHARED:
        note = where.shared_note()
    req = dataclasses.replace(req, isolation=isolation)
    run = RunFolder.for_name(name)
    # Here, not at the top: the view pulls in the controller and the report, which `orch brief` and `orch send`
    # (a lead's every call) never use; importing them was two thirds of such a call's CPU.
    from orch.view.statusbar import BootProgress

    progress = BootProgress(run, req.workers, sys.stderr, sys.stderr.isatty())  # each worker as it boots
    try:
        info = backends.start_sandbox(where, settings=settings).up(req)
    finally:
        progress.close()
    typer.echo(f"run {info.name}: {info.fleet()} up ({info.where}); folder {run.root}")
    if note is not None:  # after the run started: bad input stays one line
        typer.echo(f"run {name}: {note}", err=True)
    _notifier(run, told, started)


def _notifier(run: RunFolder, told: NotifyConfig, since: float) -> None:
    """The run's notifier (a process of its own), when something it delivers was asked for."""
    try:
        pid = start_detached(run, told, since)
    except (SandboxError, WaitTimeoutError) as exc:  # the fleet is up and usable: say what is missing
        typer.echo(f"orch: warning: run {run.name}: no notifications: {exc.one_line()}", err=True)
        return
    if pid is not None:
        typer.echo(f"run {run.name}: notifier started (pid {pid}); `orch notify mute {run.name}` silences it")


AgentOpt = Annotated[
    str,
    typer.Option("--agent", "-a", help="Agent adapter: claude, codex, gemini, opencode, aider or scripted."),
]
ModeOpt = Annotated[
    str | None,
    typer.Option(
        "--permission-mode",
        help="Agent permission mode (claude: acceptEdits + allowlist; gemini: default + allowlist; "
        "opencode: build, ask, auto; aider: build, ask).",
    ),
]
ModelOpt = Annotated[str | None, typer.Option("--model", help="Model name passed to the agent.")]
BootOpt = Annotated[float, typer.Option("--boot-timeout", help="Seconds to wait for workers to boot.")]


# The per-worker caps (SECURITY.md, "Caps"); each takes `off` for no cap.
PidsPerWorkerOpt = Annotated[
    str | None, typer.Option("--pids-per-worker", help=f"Processes and threads per worker (default {WORKER_PIDS}).")
]
MemoryPerWorkerOpt = Annotated[
    str | None, typer.Option("--memory-per-worker", help=f"Resident memory per worker (default {WORKER_MEMORY}).")
]
DiskPerWorkerOpt = Annotated[
    str | None, typer.Option("--disk-per-worker", help=f"Bytes a worker may write (default {WORKER_DISK}).")
]
RunFolderMaxOpt = Annotated[
    str | None, typer.Option("--run-folder-max", help=f"The run folder's cap (default {RUN_FOLDER_MAX}).")
]


@app.command()
def up(
    name: NameArg,
    workers: Annotated[int, typer.Option("--workers", "-n", help="Number of workers.")] = 1,
    agent: AgentOpt = DEFAULT_AGENT,
    workdir: Annotated[Path, typer.Option("--workdir", "-w", help="Folder the workers work in.")] = Path(),
    local: LocalOpt = False,
    backend: BackendOpt = None,
    permission_mode: ModeOpt = None,
    model: ModelOpt = None,
    replace: ReplaceOpt = False,
    boot_timeout: BootOpt = BOOT_TIMEOUT,
    offline: OfflineOpt = False,
    resume: Annotated[
        bool,
        typer.Option("--resume", help="Relaunch the named run, whose container or tmux died, on its folder."),
    ] = False,
    copy: CopyOpt = False,
    egress: EgressOpt = None,
    allow: AllowOpt = None,
    memory: MemoryOpt = CONTAINER_MEMORY,
    cpus: CpusOpt = None,
    pids: PidsOpt = CONTAINER_PIDS,
    network: NetworkOpt = None,
    image: ImageOpt = None,
    constraint: ConstraintOpt = None,
    per_node: PerNodeOpt = None,
    isolation: Annotated[
        Isolation | None,
        typer.Option(
            "--isolation",
            help="strict: each worker in a sandbox of its own (its own uid in a container, bubblewrap with "
            "--local), writing only its own outbox, the workdir read-only; shared: one uid for all, the "
            "workdir writable. Default: strict.",
        ),
    ] = None,
    agents: Annotated[
        str | None,
        typer.Option("--agents", help="A mixed fleet, kind:count,...: e.g. claude:2,codex:1 (instead of -n/--agent)."),
    ] = None,
    pids_per_worker: PidsPerWorkerOpt = None,
    memory_per_worker: MemoryPerWorkerOpt = None,
    disk_per_worker: DiskPerWorkerOpt = None,
    run_folder_max: RunFolderMaxOpt = None,
    notify: NotifyOpt = None,
) -> None:
    """Start a run: a container (--local: tmux here; --backend swarm: a Swarm task), an agent per pane."""
    where = placement(constraint, per_node)
    box = ContainerOpts(copy, egress, allow or [], memory, cpus, pids, network, image, where)
    limits = worker_caps(pids_per_worker, memory_per_worker, disk_per_worker, run_folder_max)
    _up(
        name, workers, agent, workdir, backends.chosen(backend, local), permission_mode, model, replace,
        boot_timeout, offline=offline, container=box, resume=resume, isolation=isolation, mixed=agents, caps=limits,
        notify=notify,
    )  # fmt: skip


def worker_caps(pids: str | None, memory: str | None, disk: str | None, folder: str | None) -> WorkerCaps:
    """The caps of `orch up`'s options over the defaults; a bad value is one line (exit 2)."""
    given = {"pids": pids, "memory": memory, "disk": disk, "run_folder": folder}
    try:
        return WorkerCaps.model_validate({k: v for k, v in given.items() if v is not None})
    except ValidationError as exc:
        error = exc.errors()[0]
        flag = {"pids": "--pids-per-worker", "run_folder": "--run-folder-max"}.get(
            str(error["loc"][0]), f"--{error['loc'][0]}-per-worker"
        )
        raise UsageError(
            f"{flag}: {error['msg']}", hint="a number with k, m or g (1g), a count for processes, or off"
        ) from None


@app.command()
def spawn(
    name: NameArg,
    workers: Annotated[int, typer.Argument(help="Number of workers.")],
    workdir: Annotated[Path, typer.Argument(help="Folder the workers work in.")] = Path(),
    agent: AgentOpt = DEFAULT_AGENT,
    local: LocalOpt = False,
    backend: BackendOpt = None,
    permission_mode: ModeOpt = None,
    model: ModelOpt = None,
    replace: ReplaceOpt = False,
    boot_timeout: BootOpt = BOOT_TIMEOUT,
) -> None:
    """`orch up` as the reference harness spells it: spawn NAME N [WORKDIR]."""
    where = backends.chosen(backend, local)
    _up(name, workers, agent, workdir, where, permission_mode, model, replace, boot_timeout)


@app.command()
def restart(name: NameArg, worker: WorkerArg) -> None:
    """Restart a worker's agent in its pane, resuming its session (what the controller does after a crash)."""
    run = run_folder(name)

    def here() -> None:
        run.check_worker(worker)
        launch.restart(run, worker, backends.confinement_of(run.info()), boot_timeout=BOOT_TIMEOUT)
        typer.echo(f"restarted worker {worker}")

    at_fleet(run, OrchCommand(["restart", name, str(worker)], here))

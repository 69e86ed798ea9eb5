"""Fleet commands: up/spawn, send, brief, read, status, ls, attach, kill, wait."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from pydantic import ValidationError

from orch.agents.registry import DEFAULT_AGENT, get_adapter
from orch.cli.common import (
    NameArg,
    WorkerArg,
    at_fleet,
    parse_workers,
    read_input,
    run_folder,
    up_request,
)
from orch.cli.container import (
    AllowOpt,
    ContainerOpts,
    CopyOpt,
    CpusOpt,
    EgressOpt,
    ImageOpt,
    MemoryOpt,
    NetworkOpt,
    PidsOpt,
)
from orch.container.backends import at_folder, sandbox_for, sandbox_for_backend
from orch.contracts import OrchCommand
from orch.errors import OrchError, UsageError, is_environment_error, one_line
from orch.fleet import bwrap, launch, talk, watch
from orch.lead.changesreport import live_lines
from orch.lead.jobs import load_state
from orch.run.folder import RunFolder, list_runs
from orch.run.records import Backend, EgressMode, Isolation, RunStatusView, WorkerCaps
from orch.settings import CONTAINER_MEMORY, CONTAINER_PIDS, RUN_FOLDER_MAX, WORKER_DISK, WORKER_MEMORY, WORKER_PIDS
from orch.text import shorten
from orch.view.statusbar import BootProgress

app = typer.Typer()  # joined into the `orch` app by orch.cli.commands


def _up(
    name: str,
    workers: int,
    agent: str,
    workdir: Path,
    local: bool,
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
) -> None:
    docker = (container or ContainerOpts()).settings(boot_timeout)
    if resume:
        info = sandbox_for(run_folder(name).info(), boot_timeout, docker).resume(name)
        typer.echo(f"run {info.name}: resumed ({info.backend.value}); folder {RunFolder.for_name(name).root}")
        return
    req = up_request(name, workers, agent, workdir, permission_mode, model, offline, replace)
    if mixed:
        kinds = parse_agents(mixed)
        req = dataclasses.replace(req, workers=len(kinds), agent=kinds[1], worker_agents=kinds)
    if caps is not None:
        req = dataclasses.replace(req, caps=caps)
    note = None
    if isolation is None:  # strict on this machine unless an agent cannot; a container run: shared, as ever
        isolation, note = bwrap.default_isolation(local, {req.agent, *req.worker_agents.values()})
    elif isolation is Isolation.SHARED and local:
        note = bwrap.SHARED_NOTE
    if note is not None:
        typer.echo(f"run {name}: {note}", err=True)
    req = dataclasses.replace(req, isolation=isolation)
    run = RunFolder.for_name(name)
    progress = BootProgress(run, req.workers, sys.stderr, sys.stderr.isatty())  # each worker as it boots
    try:
        info = sandbox_for_backend(Backend.LOCAL if local else Backend.DOCKER, boot_timeout, docker).up(req)
    finally:
        progress.close()
    typer.echo(f"run {info.name}: {info.fleet()} up ({info.where}); folder {run.root}")


def parse_agents(text: str) -> dict[int, str]:
    """`claude:2,codex:1` as worker -> kind (1, 2: claude; 3: codex); a kind alone counts one."""
    kinds: dict[int, str] = {}
    for part in text.split(","):
        kind, _, count = part.strip().partition(":")
        if not kind or not (count or "1").isdigit() or int(count or "1") < 1:
            raise UsageError(
                f"--agents: bad entry {part.strip()!r}", hint="write kind:count,..., e.g. claude:2,codex:1"
            )
        get_adapter(kind)  # an unknown kind: the registry's error lists what exists
        for _ in range(int(count or "1")):
            kinds[len(kinds) + 1] = kind
    return kinds


LocalOpt = Annotated[bool, typer.Option("--local", help="Run tmux on this machine instead of a container.")]
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
ReplaceOpt = Annotated[bool, typer.Option("--replace", help="Kill and replace an existing run of this name.")]
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
    permission_mode: ModeOpt = None,
    model: ModelOpt = None,
    replace: ReplaceOpt = False,
    boot_timeout: BootOpt = launch.BOOT_TIMEOUT,
    offline: Annotated[
        bool, typer.Option("--offline", help="Drive the agents with orch's scripted model server (no API).")
    ] = False,
    resume: Annotated[
        bool,
        typer.Option("--resume", help="Relaunch a run whose container or tmux died, on its folder (as started)."),
    ] = False,
    copy: CopyOpt = False,
    egress: EgressOpt = EgressMode.ALLOWLIST,
    allow: AllowOpt = None,
    memory: MemoryOpt = CONTAINER_MEMORY,
    cpus: CpusOpt = None,
    pids: PidsOpt = CONTAINER_PIDS,
    network: NetworkOpt = None,
    image: ImageOpt = None,
    isolation: Annotated[
        Isolation | None,
        typer.Option(
            "--isolation",
            help="strict: each worker in a sandbox of its own (its own uid in a container, bubblewrap with "
            "--local), writing only its own outbox, the workdir read-only; shared: one uid for all, the "
            "workdir writable. Default: strict with --local, shared in a container.",
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
) -> None:
    """Start a run: one container (or, with --local, a tmux server here) with one agent per pane."""
    box = ContainerOpts(copy, egress, allow or [], memory, cpus, pids, network, image)
    limits = worker_caps(pids_per_worker, memory_per_worker, disk_per_worker, run_folder_max)
    _up(
        name, workers, agent, workdir, local, permission_mode, model, replace, boot_timeout,
        offline=offline, container=box, resume=resume, isolation=isolation, mixed=agents, caps=limits,
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
    permission_mode: ModeOpt = None,
    model: ModelOpt = None,
    replace: ReplaceOpt = False,
    boot_timeout: BootOpt = launch.BOOT_TIMEOUT,
) -> None:
    """`orch up` as the reference harness spells it: spawn NAME N [WORKDIR]."""
    _up(name, workers, agent, workdir, local, permission_mode, model, replace, boot_timeout)


@app.command()
def send(
    name: NameArg,
    worker: WorkerArg,
    text: Annotated[list[str] | None, typer.Argument(help="The message (words are joined).")] = None,
    file: Annotated[str | None, typer.Option("--file", "-f", help="Send this file's text ('-': stdin).")] = None,
) -> None:
    """Deliver a message (multi-line included) to a worker as one submission, and confirm it."""
    run = run_folder(name)
    if (file is None) == (not text):
        raise UsageError("give the message as TEXT or with --file, not both", hint="orch send NAME N 'text'")
    message = read_input(file) if file is not None else " ".join(text or [])
    if not message.strip():
        raise UsageError("empty message", hint="give the text to send")

    def here() -> None:
        talk.send(run, worker, message)
        typer.echo(f"delivered to worker {worker}")

    at_fleet(run, OrchCommand(["send", name, str(worker), "--file", "-"], here, stdin=message))


@app.command()
def brief(
    name: NameArg,
    worker: WorkerArg,
    source: Annotated[str, typer.Argument(help="Brief file, or '-' for stdin.")],
) -> None:
    """Write agent-N.task.md and point the worker at it."""
    run = run_folder(name)
    text = read_input(source)

    def here() -> None:
        typer.echo(f"briefed worker {worker}: {talk.brief(run, worker, text)}")

    at_fleet(run, OrchCommand(["brief", name, str(worker), "-"], here, stdin=text))


@app.command()
def restart(name: NameArg, worker: WorkerArg) -> None:
    """Restart a worker's agent in its pane, resuming its session (what the controller does after a crash)."""
    run = run_folder(name)

    def here() -> None:
        run.check_worker(worker)
        launch.restart(run, worker, boot_timeout=launch.BOOT_TIMEOUT)
        typer.echo(f"restarted worker {worker}")

    at_fleet(run, OrchCommand(["restart", name, str(worker)], here))


@app.command()
def read(
    name: NameArg,
    worker: WorkerArg,
    lines: Annotated[int | None, typer.Option("--lines", "-l", help="Last K lines incl. scrollback.")] = None,
) -> None:
    """Print a worker's screen (or its transcript once the run is stopped)."""
    run = run_folder(name)
    args = ["read", name, str(worker), *(["--lines", str(lines)] if lines else [])]
    # Once the run is down, its transcripts answer (evidence), where its folder is on this machine.
    at_fleet(run, OrchCommand(args, lambda: typer.echo(talk.read(run, worker, lines)), folder_when_down=True))


@app.command()
def status(
    name: Annotated[str | None, typer.Argument(help="Run name (default: all runs).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Per worker: state (from hooks), done flag, result, last bus line, cost."""
    runs = [run_folder(name)] if name else list_runs()
    views = [sandbox_for(run.info()).status(run) for run in runs]
    if as_json:
        typer.echo(json.dumps([v.model_dump(mode="json") for v in views], indent=2))
        return
    if not views:
        typer.echo("no runs")
    for view, run in zip(views, runs, strict=True):
        for line in status_lines(view):
            typer.echo(line)
        for line in _changes_lines(run):
            typer.echo(f"  {line}")


def _changes_lines(run: RunFolder) -> list[str]:
    """An `orch run` with writers: where each change is (orch.lead.changesreport.live_lines)."""
    try:
        return live_lines(load_state(run))
    except OrchError:
        return []  # not an `orch run` (no controller books)


@app.command("ls")
def ls_() -> None:
    """List runs."""
    runs = list_runs()
    if not runs:
        typer.echo("no runs")
        return
    rows = [("NAME", "BACKEND", "AGENT", "WORKERS", "STATUS", "CONTAINER")]
    for run in runs:
        info = run.info()
        cells = (info.name, info.backend.value, "+".join(info.kinds()), str(info.workers), info.status.value)
        rows.append((*cells, sandbox_for(info).state(info)))
    for line in table(rows, right={3}, indent=""):
        typer.echo(line)


@app.command()
def attach(
    name: NameArg,
    write: Annotated[bool, typer.Option("--write", help="Allow typing (default: read-only).")] = False,
) -> None:
    """Attach to the run's tmux (read-only unless --write)."""
    run = run_folder(name)

    def here() -> None:
        _exec(launch.server_for(run.info()).attach_argv(read_only=not write))

    at_fleet(run, OrchCommand(["attach", name, *(["--write"] if write else [])], here, interactive=True))


@app.command()
def kill(
    name: Annotated[str | None, typer.Argument(help="Run name.")] = None,
    all_runs: Annotated[bool, typer.Option("--all", help="Kill every run.")] = False,
) -> None:
    """Stop a run (its folder, transcripts included, stays)."""
    if bool(name) == all_runs:
        raise UsageError("give a run name or --all", hint="orch kill NAME")
    failed = 0
    for run in list_runs() if all_runs else [run_folder(name or "")]:
        try:
            info = run.info()
            sandbox_for(info).kill(info)
        except Exception as exc:
            # Besides OrchError: what the Docker SDK and requests raise untranslated (the engine refused
            # or dropped a call), and OSError (the run folder).
            if not all_runs or not (isinstance(exc, OrchError) or is_environment_error(exc)):
                raise
            # One run that cannot be stopped (its engine is gone, say) must not keep the others running.
            failed += 1
            typer.echo(f"could not stop {run.name}: {one_line(exc)}", err=True)
        else:
            typer.echo(f"killed {run.name} (folder kept: {run.root})")
    if failed:
        raise typer.Exit(1)


@app.command()
def wait(
    name: NameArg,
    workers: Annotated[str | None, typer.Option("--workers", help="Comma list, e.g. 1,3 (default: all).")] = None,
    timeout: Annotated[float | None, typer.Option("--timeout", help="Seconds (default: forever).")] = None,
    pull: Annotated[bool, typer.Option("--pull", help="Then copy the run folder back from a remote engine.")] = False,
) -> None:
    """Return as soon as the workers' done flags exist; exit 3 on timeout naming who is missing."""
    run = run_folder(name)
    info = run.info()
    args = [
        "wait",
        name,
        *(["--workers", workers] if workers else []),
        *(["--timeout", f"{timeout:g}"] if timeout else []),
    ]

    def here() -> None:
        watch.wait(run, parse_workers(workers), timeout)
        typer.echo("all done")

    code = at_folder(info, OrchCommand(args, here))
    if pull and sandbox_for(info).pull(info):
        typer.echo(f"pulled into {run.root}")
    if code:
        raise typer.Exit(code)


BUS_COLUMN = 80  # the last column: a long bus line would only wrap, so it is cut (marked with "…")


def status_lines(view: RunStatusView) -> list[str]:
    """`orch status` for one run: no state detail is cut; only the bus line is capped."""
    alive = "alive" if view.alive else "not running"
    rows = [("W", "STATE", "DONE", "RESULT", "COST", "LAST BUS LINE")]
    for w in view.workers:
        state = w.state.value + (f" ({w.detail})" if w.detail else "")
        if w.rate_limited_until is not None and w.rate_limited_until > time.time():
            state += f" (rate-limited until {time.strftime('%H:%M:%S', time.localtime(w.rate_limited_until))})"
        cost = f"${w.cost_usd:.4f}" if w.cost_usd is not None else "-"
        done, result = ("yes" if w.done else "no"), ("yes" if w.result else "no")
        name = f"{w.worker} {w.agent}" if "+" in view.agent and w.agent else str(w.worker)  # a mixed fleet
        rows.append((name, state, done, result, cost, shorten(w.last_bus or "-", BUS_COLUMN)))
    title = f"run {view.name} ({view.backend.value}, {view.agent}, {view.status.value}, {alive})"
    return [title, *table(rows, right={0, 4})]


def table(rows: Sequence[Sequence[str]], right: Collection[int] = (), indent: str = "  ") -> list[str]:
    """Aligned columns, each as wide as its longest cell (nothing is cut); the last, unpadded, after two spaces."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=False))]
        lines.append(f"{indent}{' '.join(cells)}  {row[-1]}")
    return lines


def _exec(argv: list[str]) -> NoReturn:
    # Attaching from inside the user's own tmux: without $TMUX, tmux nests instead of refusing.
    env = {k: v for k, v in os.environ.items() if k != "TMUX"}
    os.execvpe(argv[0], argv, env)

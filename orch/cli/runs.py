"""Fleet commands that look at runs and end them: read, status, ls, attach, kill, wait (orch.cli.fleet starts
and drives them)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Collection, Sequence
from typing import Annotated, NoReturn

import typer

from orch import escape
from orch.backends.registry import at_folder, sandbox_for
from orch.cli.common import (
    NameArg,
    WorkerArg,
    at_fleet,
    deprecated,
    parse_workers,
    run_folder,
)
from orch.contracts import OrchCommand
from orch.errors import OrchError, UsageError, is_environment_error, one_line
from orch.fleet import control, launch, talk
from orch.jobs.state import load_state
from orch.lead.changes.status import live_lines
from orch.run.folder import RunFolder, list_runs
from orch.run.records import RunStatusView

app = typer.Typer()  # joined into the `orch` app by orch.cli.commands, after orch.cli.fleet's


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
    """An `orch run` with writers: where each change is (orch.lead.changes.status.live_lines)."""
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
        cells = (info.name, info.backend, "+".join(info.agents()), str(info.workers), info.status.value)
        rows.append((*cells, sandbox_for(info).state(info)))
    for line in table(rows, right={3}, indent=""):
        typer.echo(line)


@app.command()
def attach(
    name: NameArg,
    worker: Annotated[int | None, typer.Argument(help="Show this worker's pane (default: as tmux left it).")] = None,
    write: Annotated[bool, typer.Option("--write", help="Allow typing (default: read-only).")] = False,
) -> None:
    """Attach to the run's tmux (read-only unless --write)."""
    run = run_folder(name)
    if worker is not None:
        run.check_worker(worker)

    def here() -> None:
        server = launch.server_for(run.info())
        pane = server.pane(worker).pane_id if worker is not None else None
        _exec(server.attach_argv(read_only=not write, pane_id=pane))

    args = ["attach", name, *([str(worker)] if worker is not None else []), *(["--write"] if write else [])]
    at_fleet(run, OrchCommand(args, here, interactive=True))


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
    only: Annotated[
        str | None, typer.Option("--only", help="Only these workers, a comma list: e.g. 1,3 (default: all).")
    ] = None,
    timeout: Annotated[float | None, typer.Option("--timeout", help="Seconds (default: forever).")] = None,
    pull: Annotated[bool, typer.Option("--pull", help="Then copy the run folder back from a remote engine.")] = False,
    old_workers: Annotated[str | None, typer.Option("--workers", hidden=True, help="Old spelling of --only.")] = None,
) -> None:
    """Return as soon as the workers' done flags exist; exit 3 on timeout naming who is missing."""
    if old_workers is not None:  # --workers is a count elsewhere (`orch up --workers 3`)
        deprecated("`orch wait --workers 1,3`", "--only 1,3")
        only = old_workers
    workers = only
    run = run_folder(name)
    info = run.info()
    args = [
        "wait",
        name,
        *(["--only", workers] if workers else []),
        *(["--timeout", f"{timeout:g}"] if timeout else []),
    ]

    def here() -> None:
        control.wait(run, parse_workers(workers), timeout)
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
        state = w.state.value + (f" ({escape.terminal(w.detail)})" if w.detail else "")
        if w.rate_limited_until is not None and w.rate_limited_until > time.time():
            state += f" (rate-limited until {time.strftime('%H:%M:%S', time.localtime(w.rate_limited_until))})"
        cost = f"${w.cost_usd:.4f}" if w.cost_usd is not None else "-"
        done, result = ("yes" if w.done else "no"), ("yes" if w.result else "no")
        name = f"{w.worker} {w.agent}" if "+" in view.agent and w.agent else str(w.worker)  # a mixed fleet
        rows.append((name, state, done, result, cost, escape.terminal(w.last_bus or "-", BUS_COLUMN)))
    title = f"run {view.name} ({view.backend}, {view.agent}, {view.status.value}, {alive})"
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

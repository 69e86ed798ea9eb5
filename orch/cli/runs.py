"""Fleet commands that look at runs and end them: read, status, ls, attach, kill, wait (orch.cli.fleet starts
and drives them)."""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Collection, Sequence
from typing import Annotated, Literal, NoReturn

import typer

from orch import exitcodes
from orch.backends.registry import at_folder, sandbox_for
from orch.cli.common import (
    NameArg,
    WorkerArg,
    at_fleet,
    deprecated,
    parse_workers,
    run_folder,
)
from orch.cli.outputs import LsOutput, ReadOutput, RunRow, StatusOutput
from orch.contracts import OrchCommand
from orch.errors import OrchError, UsageError, is_environment_error, one_line
from orch.exitcodes import epilog
from orch.fleet import control, launch, talk
from orch.jobs.state import load_state
from orch.lead.changes.status import live_lines
from orch.report.runstatus import with_lead
from orch.run.folder import RunFolder, list_runs
from orch.run.statusview import RunStatusView, WorkerJob
from orch.text import clean

app = typer.Typer()  # joined into the `orch` app by orch.cli.commands, after orch.cli.fleet's


@app.command()
def read(
    name: NameArg,
    worker: WorkerArg,
    lines: Annotated[int | None, typer.Option("--lines", "-l", help="Last K lines incl. scrollback.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="The lines as JSON (docs/outputs.md).")] = False,
) -> None:
    """Print a worker's screen, or once the run is stopped its terminal as it was (its log rendered)."""
    run = run_folder(name)
    args = ["read", name, str(worker), *(["--lines", str(lines)] if lines else []), *(["--json"] if as_json else [])]

    def here() -> None:
        live = launch.server_for(run.info()).alive()
        text = talk.read(run, worker, lines)
        if not as_json:
            typer.echo(text)
            return
        source: Literal["screen", "transcript"] = "screen" if live else "transcript"
        typer.echo(ReadOutput(run=name, worker=worker, source=source, lines=text.splitlines()).model_dump_json())

    # Once the run is down, its transcripts answer (evidence), where its folder is on this machine.
    at_fleet(run, OrchCommand(args, here, folder_when_down=True))


@app.command()
def status(
    name: Annotated[str | None, typer.Argument(help="Run name (default: all runs).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output (docs/outputs.md).")] = False,
) -> None:
    """Per run: its outcome, end and cost; per worker: state (from hooks), jobs and what each came to, cost, last
    bus line. A stopped run reads from its folder."""
    runs = [run_folder(name)] if name else list_runs()
    views = [run_view(run) for run in runs]
    if as_json:
        typer.echo(StatusOutput(runs=views).model_dump_json(indent=2))
        return
    if not views:
        typer.echo("no runs")
    for view, run in zip(views, runs, strict=True):
        for line in status_lines(view):
            typer.echo(line)
        for line in _changes_lines(run):
            typer.echo(f"  {line}")


def run_view(run: RunFolder) -> RunStatusView:
    """A run's status: a stopped run's from its folder alone, a live one's from its sandbox; an `orch run`'s with
    its outcome and each worker's jobs (orch.report.runstatus)."""
    info = run.info()
    if info.status in control.STOPPED:
        view = control.status_view(run, info, panes=None)
    else:
        view = sandbox_for(info).status(run)
    return with_lead(view, run)


def _changes_lines(run: RunFolder) -> list[str]:
    """An `orch run` with writers: where each change is (orch.lead.changes.status.live_lines)."""
    try:
        return live_lines(load_state(run))
    except OrchError:
        return []  # not an `orch run` (no controller books)


@app.command("ls")
def ls_(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output (docs/outputs.md).")] = False,
) -> None:
    """List runs: each one's status, outcome, end and cost."""
    rows = []
    for run in list_runs():
        info = run.info()
        view = with_lead(control.status_view(run, info, panes=None), run)
        where = sandbox_for(info).state(info)  # "-": no container (a local run)
        container = None if where == "-" else where
        rows.append(RunRow.of(view, info.agents(), info.workers, container))
    if as_json:
        typer.echo(LsOutput(runs=rows).model_dump_json(indent=2))
        return
    if not rows:
        typer.echo("no runs")
        return
    cells = [("NAME", "STATUS", "OUTCOME", "ENDED", "COST", "WORKERS", "BACKEND", "CONTAINER")]
    for row in rows:
        outcome = f"{row.outcome.status} (exit {row.outcome.exit_code})" if row.outcome else "-"
        workers = f"{row.workers} {'+'.join(row.agents)}"
        ended = _when(row.finished)
        cells.append(
            (row.name, row.status.value, outcome, ended, _cost(row), workers, row.backend, row.container or "-")
        )
    for line in table(cells, indent=""):
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


@app.command(epilog=epilog(exitcodes.WAIT))
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
    """`orch status` for one run: its head (outcome, end, cost), then a row per worker (an `orch run`'s with its
    jobs and what each came to, an `orch up` run's with its done flag and result). No state detail is cut; only
    the bus line is capped. What a worker wrote (a bus line, a failure, the reasons in an outcome) passes
    orch.text.clean: no terminal escape reaches the terminal."""
    # A stopped run's workers are down by design: whether they are alive is said only of a run meant to be up.
    alive = "" if view.status in control.STOPPED else ", alive" if view.alive else ", not running"
    lead = view.outcome is not None or any(w.jobs for w in view.workers)
    middle_head = ("JOBS",) if lead else ("DONE", "RESULT")
    rows = [("W", "STATE", *middle_head, "COST (NOT BILLED)" if view.unbilled else "COST", "LAST BUS LINE")]
    for w in view.workers:
        state = w.state.value + (f" ({w.detail})" if w.detail else "")
        if w.out:
            state += f" (out: {clean(w.out, 80)})"
        if w.rate_limited_until is not None and w.rate_limited_until > time.time():
            state += f" (rate-limited until {time.strftime('%H:%M:%S', time.localtime(w.rate_limited_until))})"
        cost = f"${w.cost_usd:.4f}" if w.cost_usd is not None else "-"
        middle = (", ".join(_job(j) for j in w.jobs) or "-",) if lead else (_yes(w.done), _yes(w.result))
        name = f"{w.worker} {w.agent}" if "+" in view.agent and w.agent else str(w.worker)  # a mixed fleet
        rows.append((name, state, *middle, cost, clean(w.last_bus or "-", BUS_COLUMN)))
    title = f"run {view.name} ({view.backend}, {view.agent}, {view.status.value}{alive})"
    return [title, f"  {_head(view)}", *table(rows, right={0, len(rows[0]) - 2})]


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _head(view: RunStatusView) -> str:
    """`passed (exit 0): REASON; ended 2026-12-06 10:03:12 after 83 s; cost $0.4200, nothing billed (...)`."""
    if view.outcome is not None:
        head = f"{view.outcome.status} (exit {view.outcome.exit_code}): {clean(view.outcome.reason, 300)}"
    else:
        head = "no outcome" + (" yet" if view.status.value in ("starting", "running") else "")
    when = ""
    if view.finished is not None:
        took = f" after {(view.finished - view.started).total_seconds():.0f} s" if view.started else ""
        when = f"; ended {_when(view.finished.isoformat())}{took}"
    elif view.started is not None:
        when = f"; started {_when(view.started.isoformat())}"
    cost = f"${view.cost_usd:.4f}" if view.cost_usd is not None else "unknown"
    billed = f", nothing billed ({view.unbilled})" if view.unbilled else ""
    return f"{head}{when}; cost {cost}{billed}"


def _cost(row: RunRow) -> str:
    if row.cost_usd is None:
        return "-"
    return f"${row.cost_usd:.4f}" + (" (nothing billed)" if row.unbilled else "")


def _when(stamp: str | None) -> str:
    """An ISO time as this machine's local `2026-12-06 10:03:12`."""
    if stamp is None:
        return "-"
    return dt.datetime.fromisoformat(stamp).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _job(job: WorkerJob) -> str:
    """`pages done: 1 finding(s)`, `stats-F1.v1 REFUTED`, `fix LANDED`, `mean failed: why`, `t2 running`."""
    if job.status == "done" and job.result:
        return f"{job.job} {'done: ' if job.role == 'finder' else ''}{job.result}"
    if job.status == "failed" and job.result:
        return f"{job.job} failed: {clean(job.result, 60)}"
    return f"{job.job} {job.status}"


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

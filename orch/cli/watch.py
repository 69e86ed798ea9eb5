"""`orch watch`: the live view of a run (a TUI on a terminal, plain lines otherwise, a page with --web)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from orch.cli.common import run_folder
from orch.cli.runs import ls_
from orch.errors import NotFoundError
from orch.view import plain
from orch.view.remote import Puller, pull_once
from orch.view.snapshot import Watcher
from orch.view.wake import Wakeup

app = typer.Typer()  # joined into the `orch` app by orch.cli.commands


@app.command("watch")
def watch_(
    name: Annotated[
        str | None, typer.Argument(help="Run name (default: pick one; without a terminal, list runs).")
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="Print one snapshot and exit.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One snapshot as JSON, for scripts.")] = False,
    web: Annotated[
        bool, typer.Option("--web", help="Serve the view as a page on 127.0.0.1 (token in the URL).")
    ] = False,
    control: Annotated[
        bool, typer.Option("--control", help="Allow actions from the page (default: read-only).")
    ] = False,
    host: Annotated[str, typer.Option("--host", help="Address the page listens on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port for the page (0: any free port).")] = 0,
) -> None:
    """A live view of a run: workers, verification matrix, progress, commentary and bus."""
    if control and not web:
        raise typer.BadParameter("--control goes with --web (the terminal view always has its keys)")
    if web:
        from orch.view.web import serve

        watched = run_folder(name) if name else None
        if watched is not None:
            pull_once(watched.info())
        puller = Puller(watched.info()) if watched is not None else None
        try:
            serve(watched, host=host, port=port, control=control, echo=typer.echo)
        finally:
            if puller is not None:
                puller.close()
        return
    if name is None:
        if sys.stdout.isatty() and sys.stdin.isatty() and not (once or as_json):
            from orch.view.tui import run_tui

            raise typer.Exit(run_tui(None))
        ls_()
        return
    run = run_folder(name)
    pull_once(run.info())  # a run on a remote engine: its folder here is a copy, made fresh first
    watcher = Watcher(run)
    if as_json:
        typer.echo(watcher.snapshot().model_dump_json(indent=2))
        return
    if once:
        for line in plain.render(watcher.snapshot()):
            typer.echo(line)
        return
    puller = Puller(run.info())  # and kept fresh while watched
    try:
        if sys.stdout.isatty() and sys.stdin.isatty():
            from orch.view.tui import run_tui

            raise typer.Exit(run_tui(watcher.run))
        follow(watcher)
    finally:
        puller.close()


def follow(watcher: Watcher) -> None:
    """Plain timestamped lines as the run moves, until it ends (or its folder vanishes: exit 2)."""
    wake = Wakeup(watcher.run)
    before = None
    try:
        while True:
            try:
                now = watcher.snapshot()
            except NotFoundError:
                typer.echo(f"orch: error: run folder {watcher.run.root} vanished while watched", err=True)
                raise typer.Exit(2) from None
            for line in plain.changes(before, now):
                typer.echo(line)
            before = now
            if now.ended:
                typer.echo(f"{plain.clock(now.taken)} {plain.progress_line(now)}")
                return
            wake.wait()
    finally:
        wake.close()

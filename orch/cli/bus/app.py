"""`orch bus post|tail`: the run's append-only message bus."""

from __future__ import annotations

from typing import Annotated

import typer

from orch.backends import registry as backends
from orch.cli.bus.post import post
from orch.cli.common import NameArg, deprecated, run_folder
from orch.cli.outputs import BusTailOutput
from orch.contracts import OrchCommand
from orch.errors import UsageError
from orch.run import bus

app = typer.Typer(no_args_is_help=True)


@app.command("post")
def post_command(
    name: NameArg,
    text: Annotated[list[str], typer.Argument(help="The message (words are joined; '-': stdin).")],
    sender: Annotated[int | None, typer.Option("--as", help="Worker number posting (default: the lead).")] = None,
) -> None:
    """Append one line `<timestamp> [Wn] text` to bus.md (locked, one write)."""
    code = post(name, sender, text)  # also run by orch.cli.main's fast path, without typer
    if code:
        raise typer.Exit(code)


@app.command()
def tail(
    name: NameArg,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
    lines: Annotated[int, typer.Option("--lines", "-l", help="How many recent lines.")] = 20,
    old_lines: Annotated[int | None, typer.Option("-n", hidden=True, help="Old spelling of --lines.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="The lines as JSON (docs/outputs.md).")] = False,
) -> None:
    """Print the last lines of the bus, and follow it with -f (inotify)."""
    if old_lines is not None:  # -n is a count of workers elsewhere (`orch up -n 3`)
        deprecated("`orch bus tail -n N`", "--lines N (or -l N)")
        lines = old_lines
    if as_json and follow:
        raise UsageError("--json prints one document, --follow never ends", hint="drop one of them")
    run = run_folder(name)

    def here() -> None:
        last = bus.read_lines(run)[-lines:] if lines > 0 else []
        if as_json:
            parsed = [(raw, bus.parse_line(raw)) for raw in last]
            good = [line for _, line in parsed if line is not None]
            bad = [raw for raw, line in parsed if line is None]
            typer.echo(BusTailOutput(run=run.name, lines=good, unparsed=bad).model_dump_json())
            return
        for line in last:
            typer.echo(line)
        if follow:
            try:
                for line in bus.follow(run, start_at_end=True):
                    typer.echo(line)
            except KeyboardInterrupt:
                raise typer.Exit(0) from None

    args = ["bus", "tail", name, "--lines", str(lines), *(["-f"] if follow else []), *(["--json"] if as_json else [])]
    raise typer.Exit(backends.at_folder(run.info(), OrchCommand(args, here)))

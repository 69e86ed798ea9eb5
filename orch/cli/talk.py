"""`orch send` and `orch brief`: what a lead runs at every step of a fleet, so they start light.

Apart from orch.cli.fleet: `orch up`'s options bring in the container's, the notifier's and the launcher's modules
(0.1 s of CPU a call), which a message to a running worker never needs.
"""

from __future__ import annotations

from typing import Annotated

import typer

from orch.cli.common import NameArg, WorkerArg, at_fleet, deprecated, read_input, run_folder
from orch.contracts import OrchCommand
from orch.errors import UsageError
from orch.fleet import talk

app = typer.Typer()  # joined into the `orch` app by orch.cli.commands


@app.command()
def send(
    name: NameArg,
    worker: WorkerArg,
    text: Annotated[list[str] | None, typer.Argument(help="The message (words are joined).")] = None,
    file: Annotated[str | None, typer.Option("--file", help="Send this file's text ('-': stdin).")] = None,
    old_file: Annotated[str | None, typer.Option("-f", hidden=True, help="Old spelling of --file.")] = None,
) -> None:
    """Deliver a message (multi-line included) to a worker as one submission, and confirm it."""
    if old_file is not None:  # -f is --follow elsewhere (`orch bus tail -f`)
        deprecated("`orch send -f FILE`", "--file FILE")
        file = old_file
    if file is None and not text:
        raise UsageError("no message: give it as TEXT, or with --file", hint=f"orch send {name} {worker} 'text'")
    if file is not None and text:
        raise UsageError("give the message as TEXT or with --file, not both", hint=f"orch send {name} {worker} 'text'")
    run = run_folder(name)
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

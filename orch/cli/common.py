"""Argument types and small helpers shared by the CLI modules."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from orch.backends import registry as backends
from orch.contracts import OrchCommand
from orch.errors import UsageError
from orch.run.files import decode_text, read_text_input
from orch.run.folder import RunFolder

NameArg = Annotated[str, typer.Argument(help="Run name (letters, digits, . _ -; up to 64).", show_default=False)]
WorkerArg = Annotated[int, typer.Argument(help="Worker number, from 1.", show_default=False)]


def run_folder(name: str) -> RunFolder:
    run = RunFolder.for_name(name)
    run.info()  # NotFoundError with a hint when there is no such run
    return run


def read_input(source: str) -> str:
    """Text from a file path, or from stdin for `-`."""
    if source == "-":
        return decode_text(sys.stdin.buffer.read(), "standard input")
    return read_text_input(Path(source))


def parse_workers(spec: str | None) -> list[int] | None:
    if not spec:
        return None
    try:
        return [int(part) for part in spec.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"bad worker list {spec!r}", hint="use numbers separated by commas, e.g. 1,3") from None


def at_fleet(run: RunFolder, command: OrchCommand) -> NoReturn:
    """Run the command where the run's tmux server lives (its container, or this process) and exit with its code."""
    info = run.info()
    raise typer.Exit(backends.sandbox_for(info).forward(info, command))

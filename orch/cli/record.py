"""`orch record export NAME -o FILE`: a run's recording as one portable file (orch.recording.transfer)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orch.cli.common import NameArg, run_folder
from orch.recording import transfer

app = typer.Typer(no_args_is_help=True)  # `orch record`, joined by orch.cli.commands


@app.command()
def export(
    name: NameArg,
    out: Annotated[
        Path, typer.Option("-o", "--output", help="The file to write (e.g. demo.orchrec.gz).", show_default=False)
    ],
) -> None:
    """Write run NAME's recording to one file that `orch run SPEC --replay FILE` replays on any machine.

    It holds the model exchanges, the spec and its fingerprint, the recorded plan, and the orch and agent
    versions; never a credential (request headers are not recorded).
    """
    exported = transfer.export(run_folder(name), out)
    typer.echo(f"wrote {exported.path}: {exported.exchanges} exchange(s), {exported.size:,} bytes")

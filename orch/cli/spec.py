"""`orch spec check|init|schema`: fleet specs (orch.spec.model), checked exactly as `orch run` checks them."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Annotated

import typer

from orch.cli.common import (
    BackendOpt,
    BaseOpt,
    ConstraintOpt,
    CopyOpt,
    LocalOpt,
    PerNodeOpt,
    PrepareOpt,
    ReplaceOpt,
    ReplayOpt,
    RunNameOpt,
    SnapshotOpt,
    placement,
)
from orch.errors import UsageError

app = typer.Typer(no_args_is_help=True)  # `orch spec`, joined by orch.cli.commands

SpecArg = Annotated[Path, typer.Argument(help="The fleet spec (YAML).", show_default=False)]


def schema_file() -> Path:
    """The JSON Schema shipped with orch (orch/data/fleet.schema.json: tests/spec/test_reference.py keeps it equal
    to what the models make), where `spec init`'s first line points editors."""
    return Path(str(resources.files("orch") / "data" / "fleet.schema.json"))


def schema_line() -> str:
    return f"# yaml-language-server: $schema={schema_file()}\n"


@app.command()
def check(
    file: SpecArg,
    local: LocalOpt = False,
    backend: BackendOpt = None,
    name: RunNameOpt = None,
    replace: ReplaceOpt = False,
    copy: CopyOpt = False,
    replay: ReplayOpt = None,
    base: BaseOpt = None,
    snapshot: SnapshotOpt = False,
    prepare: PrepareOpt = False,
    constraint: ConstraintOpt = None,
    per_node: PerNodeOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="The result as JSON (docs/outputs.md).")] = False,
) -> None:
    """Check a fleet spec as `orch run` would before it starts (the same options), and say what it would run.

    Every problem of the spec itself is listed with its location; then the run's own checks, each refusal one
    line: the recording, the credentials, the agents, tmux, bubblewrap or the image, a run of that name, and
    for writers the repository and the spec's checks, run once on the base."""
    from orch.backends import registry as backends
    from orch.cli.lead import notices
    from orch.cli.outputs import SpecCheckOutput
    from orch.entry.preflight import preflight
    from orch.errors import OrchError
    from orch.spec.load import SpecError

    where = backends.chosen(backend, local)
    try:
        found = preflight(
            file, name, where, replace, copy, replay, base, snapshot, prepare, notices(None),
            placement=placement(constraint, per_node),
        )  # fmt: skip
    except SpecError as exc:
        problems = [str(issue) for issue in exc.issues]
        if as_json:
            typer.echo(SpecCheckOutput(file=str(file), ok=False, problems=problems).model_dump_json())
        for problem in [] if as_json else problems:
            typer.echo(f"{file}: {problem}", err=True)
        raise typer.Exit(2) from None
    except OrchError as exc:  # a refusal of the run's own checks: one line (at the CLI edge, or in the JSON)
        if not as_json:
            raise
        typer.echo(SpecCheckOutput(file=str(file), ok=False, refused=exc.one_line()).model_dump_json())
        raise typer.Exit(exc.exit_code) from None
    try:
        warnings = [*filter(None, [found.credential_warning]), *found.warnings]
        if as_json:
            shown = SpecCheckOutput(file=str(file), ok=True, run=found.name, summary=found.summary(), warnings=warnings)
            typer.echo(shown.model_dump_json())
            return
        for warning in warnings:
            typer.echo(f"orch: warning: {warning}", err=True)
        typer.echo(f"{file}: ok: {found.summary()}")
    finally:
        found.discard()


@app.command()
def init(
    file: Annotated[Path, typer.Argument(help="Where to write the example.")] = Path("fleet.yaml"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented example fleet spec (its first line points editors at orch's JSON Schema)."""
    from orch.spec.model import example_spec

    if file.exists() and not force:
        raise UsageError(f"{file} exists", hint="pass --force to overwrite it, or give another path")
    file.write_text(schema_line() + example_spec(), encoding="utf-8")
    typer.echo(f"wrote {file}; edit its tasks, then `orch spec check {file}`")


@app.command()
def schema() -> None:
    """Print the JSON Schema of a fleet spec (every key, its type, default and meaning), for editors and tools."""
    from orch.spec.reference import schema_text

    typer.echo(schema_text(), nl=False)

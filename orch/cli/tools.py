"""Machine-level commands: doctor, the scripted model server."""

from __future__ import annotations

from typing import Annotated

import typer

from orch.cli.doctor import run_checks

app = typer.Typer()  # joined into the `orch` app by orch.cli.commands


@app.command()
def doctor(
    agents: Annotated[
        str | None,
        typer.Option(
            "--agents",
            help="A fleet (kind:count,... as `orch up --agents`): list the credentials its gateway would hold, "
            "and fail if one of its model APIs has none.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output (docs/outputs.md).")] = False,
) -> None:
    """Check tmux, agent CLIs, the Docker engine and credentials; print the fix for what is missing."""
    from orch.cli.fleet import parse_agents

    fleet = list(dict.fromkeys(parse_agents(agents).values())) if agents else None
    checks = run_checks(fleet)
    failed = any(not c.ok and not c.optional for c in checks)
    if as_json:
        from orch.cli.outputs import DoctorCheck, DoctorOutput

        typer.echo(DoctorOutput(ok=not failed, checks=[DoctorCheck.of(c) for c in checks]).model_dump_json(indent=2))
    for check in [] if as_json else checks:
        mark = "ok " if check.ok else ("-- " if check.optional else "!! ")
        line = f"{mark}{check.name:<14} {check.detail}"
        if not check.ok and check.fix:
            line += f"\n   fix: {check.fix}"
        typer.echo(line)
    if failed:
        raise typer.Exit(1)


@app.command("model-server")
def model_server(
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0: a free one).")] = 0,
) -> None:
    """Serve the scripted Messages API (offline demo, tests, dry runs) until interrupted."""
    from orch.offline.modelserver import main as serve

    raise typer.Exit(serve(["--host", host, "--port", str(port)]))

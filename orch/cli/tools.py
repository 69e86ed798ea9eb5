"""Machine-level commands: doctor, setup (the agent CLIs), the scripted model server."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orch.cli.doctor import run_checks
from orch.versions import DEFAULT_AGENT
from orch.view.statusbar import SetupProgress

if TYPE_CHECKING:
    from orch.agents.installs import Install

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
    """Check each backend (tmux, bubblewrap, the Docker engine...), agent CLIs and credentials; print the fix for
    what is missing."""
    from orch.cli.common import parse_agents

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


@app.command()
def setup(
    agents: Annotated[
        str,
        typer.Option("--agents", help="The agent CLIs to install (pinned), as for `orch up`: e.g. claude,codex; all."),
    ] = DEFAULT_AGENT,
    spec: Annotated[
        Path | None, typer.Option("--spec", help="Instead of --agents: the agents this fleet spec's workers run.")
    ] = None,
    image: Annotated[
        bool,
        typer.Option(
            "--image", help="Build the worker image carrying them (for runs in a container) instead of installing here."
        ),
    ] = False,
) -> None:
    """Install the agent CLIs a job needs into orch's cache ($XDG_CACHE_HOME/orch), checking this machine first."""
    from orch import prereqs
    from orch.agents import installs
    from orch.cli.common import agent_names

    names = spec_agents(spec) if spec is not None else agent_names(agents)
    items = installs.plan(names)
    todo = [] if image else [item for item in items if not item.installed()]
    # What this machine lacks is said before anything is downloaded: each its own line, all of them.
    missing = prereqs.missing(local=not image, npm=any(not item.pip for item in todo), with_docker=image)
    if missing:
        for lack in missing:
            typer.echo(f"orch: error: {lack.line()}", err=True)
        raise typer.Exit(2)
    if image:
        _image(names)
        return
    if not items:
        typer.echo(f"setup: nothing to install for {', '.join(names)}")
    for item in items:
        _install(item, item in todo)


def spec_agents(path: Path) -> list[str]:
    """The agents a fleet spec's workers run; its every problem listed with its line (exit 2) when it has any."""
    from orch.spec.load import SpecError, load_spec

    try:
        return list(dict.fromkeys(group.agent for group in load_spec(path).groups()))
    except SpecError as exc:
        for issue in exc.issues:
            typer.echo(f"{path}: {issue}", err=True)
        raise typer.Exit(2) from None


def _install(item: Install, needed: bool) -> None:
    from orch.agents import installs
    from orch.run.paths import agent_cache

    what = f"{item.title} {item.version}"
    if not needed:
        typer.echo(f"setup: {what} is installed ({item.binary})")
        return
    typer.echo(f"setup: {what} from {item.source} into {agent_cache()} (about {item.size_mb} MB installed)")
    measure = functools.partial(installs.size_mb, item.prefix)
    progress = SetupProgress(sys.stderr, sys.stderr.isatty(), measure, item.size_mb)
    try:
        installs.install(item, progress.tick)
    finally:
        progress.close()
    typer.echo(f"setup: {what} installed in {progress.elapsed():.0f} s ({installs.size_mb(item.prefix)} MB)")


def _image(names: list[str]) -> None:
    """The worker image carrying these agents, built unless the one there is current."""
    from orch.backends.docker.image import carries_current
    from orch.cli.container import image_build
    from orch.settings.user import BASE_IMAGE, IMAGE

    tag, base = IMAGE.get(), BASE_IMAGE.get()
    if carries_current(tag, base, names):
        typer.echo(f"setup: the worker image {tag} carries {', '.join(names)} and is current")
        return
    image_build(agents=",".join(names))


@app.command("model-server")
def model_server(
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0: a free one).")] = 0,
) -> None:
    """Serve the scripted Messages API (offline demo, tests, dry runs) until interrupted."""
    from orch.offline.modelserver import main as serve

    raise typer.Exit(serve(["--host", host, "--port", str(port)]))

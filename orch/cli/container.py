"""Container commands: `orch image build`, `orch reap`, `orch pull`, the hidden `orch serve-run`, and
the container options of `orch up`."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer

from orch.agents.registry import IMAGE_AGENT
from orch.backends import registry as backends
from orch.backends.base import Placement, UpOptions
from orch.cli.common import NameArg, agent_names, deprecated, run_folder
from orch.errors import UsageError
from orch.exitcodes import Exit
from orch.fleet.booting import BOOT_TIMEOUT
from orch.run.records import EgressMode
from orch.settings.compose import AGENT, MODEL, OFFLINE, PERMISSION_MODE, WORKERS
from orch.settings.limits import CONTAINER_MEMORY, CONTAINER_PIDS
from orch.settings.user import BASE_IMAGE, CA_BUNDLE, IMAGE

EgressOpt = Annotated[
    EgressMode | None,
    typer.Option(
        "--egress",
        help="Network egress: allowlist (model API, npm, PyPI, GitHub, --allow), none (loopback), or open. "
        "Default: allowlist in a container; with --local none (allowlist: a CONNECT proxy per worker).",
        case_sensitive=False,
    ),
]
AllowOpt = Annotated[
    list[str] | None,
    typer.Option("--allow", help="Add a host, IP or CIDR to the egress allowlist (repeatable; --local: HOST[:PORT])."),
]
MemoryOpt = Annotated[str, typer.Option("--memory", help="Container memory limit, e.g. 4g (no swap beyond it).")]
CpusOpt = Annotated[float | None, typer.Option("--cpus", help="CPU limit (default: 2, or fewer if fewer).")]
PidsOpt = Annotated[
    int,
    typer.Option(
        "--pids", help="Process/thread limit of the container (raised to every worker's --pids-per-worker + a reserve)."
    ),
]
NetworkOpt = Annotated[
    str | None,
    typer.Option(
        "--network",
        help="Docker network to join (default: bridge; --backend swarm: an overlay network, besides the run's own).",
    ),
]
ImageOpt = Annotated[
    str | None, typer.Option("--image", help=f"Worker image (default: ${IMAGE.name} or {IMAGE.default}).")
]


@dataclass(frozen=True)
class ContainerOpts:
    """The container options of `orch up`, as given on the command line: each backend takes what concerns it
    (orch.backends.base.UpOptions)."""

    copy: bool = False
    egress: EgressMode | None = None
    allow: list[str] = field(default_factory=list)
    memory: str = CONTAINER_MEMORY
    cpus: float | None = None
    pids: int = CONTAINER_PIDS
    network: str | None = None
    image: str | None = None
    placement: Placement = field(default_factory=Placement)

    def options(self, boot_timeout: float | None) -> UpOptions:
        return UpOptions(
            boot_timeout, self.copy, self.egress, tuple(self.allow), self.memory, self.cpus, self.pids, self.network,
            self.image, self.placement,
        )  # fmt: skip


# Joined into the `orch` app by orch.cli.commands: `app`'s commands at the top, `image_app` as `orch image`.
app = typer.Typer()
image_app = typer.Typer(no_args_is_help=True)


@image_app.command("build")
def image_build(
    base_image: Annotated[
        str | None,
        typer.Option("--base-image", help=f"Base image (default: ${BASE_IMAGE.name} or {BASE_IMAGE.default})."),
    ] = None,
    agent_version: Annotated[
        str | None, typer.Option("--claude-version", help="Version of the image's agent CLI (default: the pinned one).")
    ] = None,
    ca_bundle: Annotated[
        Path | None,
        typer.Option(
            "--ca-bundle",
            help=f"Extra CA bundle trusted during the build only (TLS-intercepting proxies; ${CA_BUNDLE.name}).",
        ),
    ] = None,
    tag: Annotated[
        str | None, typer.Option("--tag", help=f"Image tag (default: ${IMAGE.name} or {IMAGE.default}).")
    ] = None,
    agents: Annotated[
        str,
        typer.Option(
            "--agents", help="The agent CLIs the image carries (pinned), as for `orch up`: e.g. claude,codex; all."
        ),
    ] = IMAGE_AGENT,
    old_base: Annotated[str | None, typer.Option("--base", hidden=True, help="Old spelling of --base-image.")] = None,
) -> None:
    """Build the worker image from docker/Dockerfile, printing the engine's progress as it goes."""
    from orch.backends.docker.image import build_image

    if old_base is not None:  # --base is a revision of your repository on `orch run`
        deprecated("`orch image build --base IMAGE`", "--base-image IMAGE")
        base_image = old_base
    base, ca_bundle, tag = base_image or BASE_IMAGE.get(), ca_bundle or CA_BUNDLE.get(), tag or IMAGE.get()
    kinds = agent_names(agents)
    if not sys.stdout.isatty():  # a log: every line the engine printed
        image_id = build_image(base, agent_version, ca_bundle, tag, lambda line: typer.echo(line), kinds)
    else:  # a terminal: the steps, and under them the current step's output as one line
        from orch.view.statusbar import BuildProgress  # here: the view is costly to import, and only a build shows it

        progress = BuildProgress(sys.stdout)
        try:
            image_id = build_image(base, agent_version, ca_bundle, tag, progress.line, kinds)
        finally:
            progress.close()
    typer.echo(f"built {tag} ({image_id})")


@app.command("serve-run", hidden=True)
def serve_run(
    name: NameArg,
    boot_timeout: Annotated[float, typer.Option("--boot-timeout")] = BOOT_TIMEOUT,
    resume: Annotated[bool, typer.Option("--resume")] = False,
    create: Annotated[bool, typer.Option("--create", help="Make the run here if missing (else resume).")] = False,
    # With --create (compose), the fleet may also be described by the environment (orch.settings).
    workers: Annotated[int | None, typer.Option("--workers", "-n", help=f"${WORKERS.name}")] = None,
    agent: Annotated[str | None, typer.Option("--agent", "-a", help=f"${AGENT.name}")] = None,
    workdir: Annotated[Path, typer.Option("--workdir", "-w")] = Path("/workspace"),
    permission_mode: Annotated[str | None, typer.Option("--permission-mode", help=f"${PERMISSION_MODE.name}")] = None,
    model: Annotated[str | None, typer.Option("--model", help=f"${MODEL.name}")] = None,
    offline: Annotated[bool, typer.Option("--offline", help=f"${OFFLINE.name}")] = False,
    drive: Annotated[
        bool, typer.Option("--drive", help="Then run the controller on the run (compose's lead): its exit code.")
    ] = False,
) -> None:
    """Inside a run's container: launch the run's workers and stay until SIGTERM (or, with --drive, until
    the controller ends)."""
    from orch.container.serverun import compose_request, serve

    if not backends.here().container:
        raise UsageError("serve-run runs inside a run's container", hint="use `orch up`")
    if drive and create:
        raise UsageError("--drive is for a run made from a spec (`orch run SPEC --prepare`), not --create")
    failed: int = Exit.ERROR
    if drive:
        from orch.lead.controller import read_spec

        boot_timeout, failed = read_spec(run_folder(name)).timeouts.boot, Exit.FAILED
    req = compose_request(name, workers, agent, workdir, permission_mode, model, offline) if create else None
    confine = backends.confinement_of
    raise typer.Exit(serve(name, boot_timeout, resume, confine, req, drive=drive, failed=failed))


@app.command()
def reap() -> None:
    """Remove containers, volumes and workspace copies left by crashed or stopped runs (by label)."""
    from orch.backends.docker.engine import docker_client
    from orch.backends.docker.reap import reap as reap_engine

    removed = reap_engine(docker_client())
    for item in removed:
        typer.echo(f"removed {item}")
    if not removed:
        typer.echo("nothing to reap")


@app.command()
def pull(name: NameArg) -> None:
    """Copy a run folder back from a remote Docker engine into the local one."""
    run = run_folder(name)
    info = run.info()
    if backends.sandbox_for(info).pull(info):
        typer.echo(f"pulled {name} into {run.root}")
    else:
        typer.echo(f"run {name} is on this machine already: {run.root}")

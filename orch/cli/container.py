"""Container commands: `orch image build`, `orch reap`, `orch pull`, the hidden `orch serve-run`, and
the container options of `orch up`."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orch.cli.common import NameArg, run_folder, up_request
from orch.container import backends
from orch.errors import UsageError
from orch.fleet import launch
from orch.run.records import ContainerOptions, EgressMode
from orch.versions import CLAUDE_CODE_VERSION, DEFAULT_BASE_IMAGE, DEFAULT_IMAGE_TAG

if TYPE_CHECKING:
    from orch.container.sandbox import DockerSettings

DEFAULT_MEMORY = "8g"
DEFAULT_PIDS = 4096
DEFAULT_CPUS = 2.0

CopyOpt = Annotated[
    bool, typer.Option("--copy", help="Give the workers a disposable copy of the workdir (removed on kill).")
]
EgressOpt = Annotated[
    EgressMode,
    typer.Option(
        "--egress",
        help="Network egress: allowlist (model API, npm, PyPI, GitHub, --allow), none (loopback), or open.",
        case_sensitive=False,
    ),
]
AllowOpt = Annotated[
    list[str] | None, typer.Option("--allow", help="Add a host, IP or CIDR to the egress allowlist (repeatable).")
]
MemoryOpt = Annotated[str, typer.Option("--memory", help="Container memory limit, e.g. 4g (no swap beyond it).")]
CpusOpt = Annotated[float | None, typer.Option("--cpus", help="CPU limit (default: 2, or fewer if fewer).")]
PidsOpt = Annotated[int, typer.Option("--pids", help="Process/thread limit of the container.")]
NetworkOpt = Annotated[str | None, typer.Option("--network", help="Docker network to join (default: bridge).")]
ImageOpt = Annotated[
    str | None, typer.Option("--image", help=f"Worker image (default: $ORCH_IMAGE or {DEFAULT_IMAGE_TAG}).")
]


@dataclass(frozen=True)
class ContainerOpts:
    """The container options of `orch up`, as given on the command line."""

    copy: bool = False
    egress: EgressMode = EgressMode.ALLOWLIST
    allow: list[str] = field(default_factory=list)
    memory: str = DEFAULT_MEMORY
    cpus: float | None = None
    pids: int = DEFAULT_PIDS
    network: str | None = None
    image: str | None = None

    def settings(self, boot_timeout: float) -> DockerSettings:
        from orch.container.sandbox import DockerSettings, default_image

        cpus = self.cpus if self.cpus is not None else min(DEFAULT_CPUS, float(os.cpu_count() or 1))
        if cpus <= 0 or self.pids < 16:
            raise UsageError("--cpus must be positive and --pids at least 16")
        options = ContainerOptions(
            egress=self.egress,
            allow=self.allow,
            memory=self.memory,
            cpus=cpus,
            pids=self.pids,
            network=self.network,
            copy_workdir=self.copy,
        )
        return DockerSettings(image=self.image or default_image(), options=options, boot_timeout=boot_timeout)


image_app = typer.Typer(no_args_is_help=True)


@image_app.command("build")
def image_build(
    base: Annotated[
        str | None, typer.Option("--base", help=f"Base image (default: $ORCH_BASE_IMAGE or {DEFAULT_BASE_IMAGE}).")
    ] = None,
    claude_version: Annotated[str, typer.Option("--claude-version", help="Claude Code version.")] = CLAUDE_CODE_VERSION,
    ca_bundle: Annotated[
        Path | None,
        typer.Option("--ca-bundle", help="Extra CA bundle trusted during the build only (TLS-intercepting proxies)."),
    ] = None,
    tag: Annotated[str, typer.Option("--tag", help="Image tag.")] = DEFAULT_IMAGE_TAG,
) -> None:
    """Build the worker image from docker/Dockerfile, printing the engine's progress as it goes."""
    from orch.container.image import build_image

    chosen = base or os.environ.get("ORCH_BASE_IMAGE") or DEFAULT_BASE_IMAGE
    image_id = build_image(chosen, claude_version, ca_bundle, tag, lambda line: typer.echo(line))
    typer.echo(f"built {tag} ({image_id})")


def register(app: typer.Typer) -> None:
    app.add_typer(image_app, name="image", help="The worker image.")

    @app.command("serve-run", hidden=True)
    def serve_run(
        name: NameArg,
        boot_timeout: Annotated[float, typer.Option("--boot-timeout")] = launch.BOOT_TIMEOUT,
        resume: Annotated[bool, typer.Option("--resume")] = False,
        create: Annotated[bool, typer.Option("--create", help="Make the run here if missing (else resume).")] = False,
        # With --create (compose), the fleet may also be described by the environment.
        workers: Annotated[int, typer.Option("--workers", "-n", envvar="ORCH_WORKERS")] = 1,
        agent: Annotated[str, typer.Option("--agent", "-a", envvar="ORCH_AGENT")] = "claude",
        workdir: Annotated[Path, typer.Option("--workdir", "-w")] = Path("/workspace"),
        permission_mode: Annotated[str | None, typer.Option("--permission-mode", envvar="ORCH_PERMISSION_MODE")] = None,
        model: Annotated[str | None, typer.Option("--model", envvar="ORCH_MODEL")] = None,
        offline: Annotated[bool, typer.Option("--offline", envvar="ORCH_OFFLINE")] = False,
    ) -> None:
        """Inside a run's container: launch the run's workers and stay until SIGTERM."""
        from orch.container.serverun import serve

        if not backends.in_container():
            raise UsageError("serve-run runs inside a run's container", hint="use `orch up`")
        req = up_request(name, workers, agent, workdir, permission_mode, model, offline) if create else None
        raise typer.Exit(serve(name, boot_timeout, resume, req))

    @app.command()
    def reap() -> None:
        """Remove containers, volumes and workspace copies left by crashed or stopped runs (by label)."""
        from orch.container.engine import docker_client
        from orch.container.reap import reap as reap_engine

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

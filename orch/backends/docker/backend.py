"""The docker backend: one disposable, hardened container per run on a Docker engine (DOCKER_HOST, local or
`ssh://`), its controller and tmux inside (orch.backends.docker.sandbox). Inside a run's container every fleet
is local to it: there this backend answers as the place this process runs in (`registry.here()`)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from orch.backends.base import Backend, BackendSettings, ChecksSandbox, UpOptions, in_container
from orch.backends.local.backend import SHARED_NOTE_CONTAINER, LocalBackend, LocalSettings
from orch.errors import OrchError, UsageError
from orch.run.records import ContainerOptions, DockerRunInfo, EgressMode, RunInfo
from orch.settings.limits import CONTAINER_CPUS
from orch.settings.user import BASE_IMAGE, IMAGE

if TYPE_CHECKING:
    from orch.contracts import Check, Sandbox
    from orch.fleet.confinement import Confinement


def default_image() -> str:
    return IMAGE.get()


def container_options(options: UpOptions, cpus: float, copy: bool) -> ContainerOptions:
    """How a run's container is confined, from the command line: a container run's, and a swarm run's task's."""
    if cpus <= 0 or options.pids < 16:
        raise UsageError("--cpus must be positive and --pids at least 16")
    return ContainerOptions(
        egress=options.egress or EgressMode.ALLOWLIST,
        allow=list(options.allow),
        memory=options.memory,
        cpus=cpus,
        pids=options.pids,
        network=options.network,
        copy_workdir=copy,
    )


class DockerSettings(BackendSettings):
    """A container run's settings: its image and how its container is confined."""

    backend: Literal["docker"] = "docker"
    image: str = Field(default_factory=default_image)
    options: ContainerOptions = Field(default_factory=ContainerOptions)


class DockerBackend(Backend):
    name = "docker"
    title = "the container backend"
    about = "one disposable, hardened container per run on a Docker engine (DOCKER_HOST, local or ssh://)"
    record = DockerRunInfo
    pinned_agents = True  # the worker image's
    checks_at_start = False  # the run's controller runs them in its container (the checks' uid there)
    checks = (ChecksSandbox.BWRAP, ChecksSandbox.OWN_UID, ChecksSandbox.RUN_UID)  # bwrap fails there (seccomp)
    gateway_keeper = True  # the init's keeper, as the gateway's uid (orch.container.gatewaykeeper)
    container = True

    def settings(self, options: UpOptions) -> DockerSettings:
        self.refuse_placement(options)
        network = options.network or ""
        if network == "host" or network.startswith("container:"):  # the init's firewall would be that namespace's
            raise UsageError(
                f"--network {network}: a run's container keeps a network namespace of its own (its firewall is set "
                "in it, and its workers must not reach the host's loopback services)",
                hint="a bridge network of yours (docker network create NAME; --network NAME), or drop --network",
            )
        cpus = options.cpus if options.cpus is not None else min(CONTAINER_CPUS, float(os.cpu_count() or 1))
        opts = container_options(options, cpus, options.copy)
        return DockerSettings(image=options.image or default_image(), options=opts, boot_timeout=options.boot_timeout)

    def sandbox(self, settings: BackendSettings | None = None) -> Sandbox:
        """A container run's sandbox from the host; inside a run's container, the local one: its tmux is here."""
        if in_container():
            local = LocalSettings(boot_timeout=settings.boot_timeout) if settings is not None else None
            return LocalBackend().sandbox(local)
        from orch.backends.docker.sandbox import DockerSandbox

        if settings is not None and not isinstance(settings, DockerSettings):
            raise TypeError(f"the docker backend takes DockerSettings, not {type(settings).__name__}")
        return DockerSandbox(settings)

    def shared_note(self) -> str:
        return SHARED_NOTE_CONTAINER

    def confinement(self, info: RunInfo) -> Confinement:
        """Inside the run's container, where its fleet is local: a uid per worker, or one shared, boxed in it."""
        if not in_container():
            return super().confinement(info)
        return LocalBackend().confinement(info)

    def doctor(self) -> list[Check]:
        from orch.contracts import Check

        try:
            from orch.backends.docker.engine import docker_client, engine_address
            from orch.backends.docker.image import image_exists

            version = docker_client().version().get("Version", "?")
        except OrchError as exc:
            return [Check("docker", False, exc.message, exc.hint, optional=True)]
        checks = [Check("docker", True, f"engine {version} at {engine_address()}", optional=True)]
        image = default_image()
        try:
            found = image_exists(image)
        except OrchError as exc:
            return [*checks, Check("image", False, exc.message, exc.hint, optional=True)]
        fix = "orch image build (add --base-image IMAGE where no registry is reachable)"
        checks.append(Check("image", found, image if found else f"{image} not built", None if found else fix, True))
        return checks

    def ready(self, agents: Iterable[str]) -> str | None:
        """None when the engine answers and the worker image is built from this orch for these agents."""
        from orch.backends.docker.image import carries_current, image_exists

        wanted = tuple(dict.fromkeys(agents))
        tag = IMAGE.get()
        build = "orch image build" + (f" --agents {','.join(wanted)}" if wanted != ("claude",) else "")
        try:
            if not image_exists(tag):
                return f"the worker image {tag} is not built (`{build}`)"
        except OrchError as exc:
            return exc.message
        try:
            if not carries_current(tag, BASE_IMAGE.get(), wanted):
                return f"the worker image {tag} is not built from this orch for these agents (`{build}`)"
        except OrchError:
            pass  # not a source checkout: the image cannot be compared with the sources, take it as it is
        return None

    def folder_is_here(self, info: RunInfo) -> bool:
        """On a remote engine the run folder is a volume there, and this one a copy; inside the run's container
        the mounted folder is the run's."""
        return not (isinstance(info, DockerRunInfo) and info.container.on_remote_engine and not in_container())

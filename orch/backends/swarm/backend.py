"""The swarm backend: each run a Swarm service in job mode on a node Swarm's scheduler picks, driven through a
manager (DOCKER_HOST, local or `ssh://`) alone (orch.backends.swarm.sandbox). Its task is a container run there:
inside it, the docker backend answers (`registry.here()`), as in any run's container."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from orch.backends.base import Backend, BackendSettings, ChecksSandbox, UpOptions
from orch.backends.docker.backend import container_options, default_image
from orch.backends.local.backend import SHARED_NOTE_CONTAINER
from orch.backends.swarm.record import SwarmRunInfo
from orch.errors import OrchError, UsageError
from orch.run.records import ContainerOptions, RunInfo
from orch.settings.limits import CONTAINER_CPUS
from orch.spec.placement import SWARM_CONSTRAINT

if TYPE_CHECKING:
    from orch.contracts import Check, Sandbox

NODE_NETWORKS = ("bridge", "host", "none", "docker_gwbridge", "ingress")
"""Docker's own networks: each node's (or the routing mesh's), never one a run's task joins besides its overlay."""


class SwarmSettings(BackendSettings):
    """A swarm run's settings: its image, how its task is confined, and where Swarm may place it."""

    backend: Literal["swarm"] = "swarm"
    image: str = Field(default_factory=default_image)
    options: ContainerOptions = Field(default_factory=ContainerOptions)
    constraints: list[str] = Field(default_factory=list)
    """Swarm placement constraints (`--constraint`), each `KEY==VALUE` or `KEY!=VALUE`."""
    per_node: int | None = Field(default=None, ge=1)
    """At most this many orch runs on one node when this one is placed (`--per-node`; None: as Swarm sees fit)."""
    drive: bool = False
    """A lead run (`orch run`): its task runs the controller too; its first life starts once the spec and the
    controller's state are pushed."""


class SwarmBackend(Backend):
    name = "swarm"
    title = "the swarm backend"
    about = "one Swarm service per run on a node Swarm picks, through a manager (DOCKER_HOST, local or ssh://)"
    record = SwarmRunInfo
    pinned_agents = True  # the worker image's, on every node
    places = True
    checks_at_start = False  # the run's controller runs them in its task, as in a run's container
    container = True  # its task is a run's container; inside it the docker backend answers (`registry.here()`)
    checks = (ChecksSandbox.BWRAP, ChecksSandbox.OWN_UID)
    gateway_keeper = True
    comes_home = True  # every ORCH_SWARM_SYNC_INTERVAL while `orch run` follows it
    lingers = True  # the run's collector, secrets and network outlive its task: `kill` removes them

    def settings(self, options: UpOptions) -> SwarmSettings:
        cpus = options.cpus if options.cpus is not None else CONTAINER_CPUS
        if options.placement.per_node is not None and options.placement.per_node < 1:
            raise UsageError(f"--per-node {options.placement.per_node}: give at least 1", hint="--per-node 4")
        for constraint in options.placement.constraints:
            if not SWARM_CONSTRAINT.match(constraint):
                raise UsageError(
                    f"--constraint {constraint!r}: expected KEY==VALUE or KEY!=VALUE",
                    hint="--constraint node.labels.zone==eu (Swarm's placement constraints)",
                )
        if options.network in NODE_NETWORKS:  # a service's task joins swarm-scoped (overlay) networks alone
            raise UsageError(
                f"--network {options.network}: a swarm run's task joins an overlay network besides its own, "
                "not a node's own network",
                hint="docker network create --driver overlay NAME, then --network NAME; or drop --network",
            )
        # The task works on the collector's copy of the workdir, never the original.
        opts = container_options(options, cpus, copy=True)
        return SwarmSettings(
            image=options.image or default_image(),
            options=opts,
            boot_timeout=options.boot_timeout,
            constraints=list(options.placement.constraints),
            per_node=options.placement.per_node,
            drive=options.lead,
        )

    def sandbox(self, settings: BackendSettings | None = None) -> Sandbox:
        from orch.backends.swarm.sandbox import SwarmSandbox

        if settings is not None and not isinstance(settings, SwarmSettings):
            raise TypeError(f"the swarm backend takes SwarmSettings, not {type(settings).__name__}")
        return SwarmSandbox(settings)

    def shared_note(self) -> str:
        return SHARED_NOTE_CONTAINER

    def doctor(self) -> list[Check]:
        """The swarm behind DOCKER_HOST: a manager, its ready nodes, what Swarm cannot enforce
        (orch.backends.swarm.cluster); no engine: nothing (the docker backend's line says so)."""
        try:
            from orch.backends.docker.engine import docker_client, engine_address
            from orch.backends.swarm.cluster import doctor_checks

            return doctor_checks(docker_client(), engine_address())
        except OrchError:
            return []

    def folder_is_here(self, info: RunInfo) -> bool:
        """This side's folder is a copy, pulled from the run's collector."""
        return False

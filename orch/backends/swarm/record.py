"""The swarm backend's variant of run.json (orch.run.records keeps the variants every layer reads): where a
swarm run lives as the user's side sees it, life by life. Inside its task the run's own run.json is a
`DockerRunInfo`: the task is a container, and runs as one."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from orch.run.records import ContainerOptions, RunInfoBase, Strict


class SwarmLife(Strict):
    """One life of a swarm run: the task that ran it, where, and how it ended (None: it runs)."""

    life: int
    service: str
    """The service id."""
    node: str = ""
    """The node's hostname, once the task was placed."""
    ended: str | None = None
    """How it ended: `exit N`, or why it was lost (`node orch-sw-w1 is down: heartbeat failure`)."""


class SwarmInfo(Strict):
    """Where a swarm run lives, as the user's side sees it (orch.backends.swarm): its manager, its objects
    there, its lives, and how far this copy of its folder has come home."""

    manager: str | None = None
    """The manager's engine (DOCKER_HOST when the run started; None: the default local engine)."""
    manager_node: str = ""
    """That engine's node id: the collector runs there, so the user's side reaches it through that engine."""
    image: str
    workdir: str = ""
    """The workdir the user named, on this side (its copy went to the run's collector)."""
    options: ContainerOptions = Field(default_factory=ContainerOptions)
    constraints: list[str] = Field(default_factory=list)
    """Swarm placement constraints (`node.labels.zone==eu`), the spec's or `--constraint`'s."""
    per_node: int | None = None
    """At most this many orch runs on one node when this one is placed (None: as Swarm sees fit)."""
    user: str = "1000:1000"
    """uid:gid of the run's controller in its task (the user's side owns its copy of the folder)."""
    lives: list[SwarmLife] = Field(default_factory=list)
    seq: int = 0
    """The last pass of the collector's log applied to this copy of the run folder."""
    lost: str | None = None
    """Why the run stopped where it ran (its node died, its task failed): `--resume` continues it elsewhere."""
    drive: bool = False
    """A lead run (`orch run`): each life's task runs the controller too (`serve-run --drive`); its first life
    starts once the spec and the controller's state are pushed (orch.backends.swarm.sandbox)."""

    @property
    def life(self) -> SwarmLife | None:
        return self.lives[-1] if self.lives else None


class SwarmRunInfo(RunInfoBase):
    """A run as a Swarm service on a node the scheduler chose; its folder comes home through its collector.
    Inside its task the run's own run.json is a `DockerRunInfo` (the task is a container, and runs as one)."""

    backend: Literal["swarm"] = "swarm"
    swarm: SwarmInfo

    @property
    def where(self) -> str:
        life = self.swarm.life
        return f"swarm node {life.node}" if life is not None and life.node else "swarm"

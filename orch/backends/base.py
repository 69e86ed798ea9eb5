"""The backend contract: where a run lives, and every question whose answer depends on it.

A backend is a package under orch/backends/ with a `Backend` subclass, registered by name in
orch.backends.registry (`local`, `docker`). It says, as facts and methods:

- where a run's tmux server and controller live, seen from this process (`sandbox`: orch.contracts.Sandbox);
- its settings, made from what `orch up`, `orch run` and `orch demo` were told (`settings`), and its variant of
  run.json (`record`, orch.run.records: each backend's settings travel on its own variant);
- how its runs' workers are confined where their tmux server runs (`confinement`, orch.fleet.confinement);
- what it needs on this machine (`doctor`) and whether it can run a fleet here now (`ready`);
- the answers to every question that used to branch on the backend: whether its workers run orch's pinned agent
  versions, where a run's checks run first, whether strict isolation can be had, who keeps the gateway.

Nothing outside orch/backends/ asks which backend a run has: it asks the run's backend
(`registry.backend_of(info)`), or the backend this process runs in (`registry.here()`: the docker backend inside a
run's container, else the local one).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, ClassVar

from orch.errors import SandboxError, UsageError
from orch.run.records import EgressMode, Isolation, RunInfo, RunInfoBase, Strict
from orch.settings.internal import IN_CONTAINER
from orch.settings.limits import CONTAINER_MEMORY, CONTAINER_PIDS

if TYPE_CHECKING:
    from orch.contracts import Check, Sandbox
    from orch.fleet.confinement import Confinement

# Light on purpose: `orch bus post` (a worker's every post) asks a run's backend whether its folder is here, and
# must not import the contracts, tmux, docker or the fleet code for it (tests/cli/bus/test_post.py).


def in_container() -> bool:
    """True inside a run's container (its controller and tmux live there): the backends' own question, never
    asked outside orch/backends/ (the others ask `registry.here()` and the run's backend)."""
    return IN_CONTAINER.get()


class ChecksSandbox(StrEnum):
    """Where a change's checks may run (orch.lead.changes.gate runs them there)."""

    BWRAP = "bwrap"
    """A bubblewrap sandbox of its own: no network, its own pid namespace, the file system read-only but its tmpfs."""
    OWN_UID = "uid"
    """In a run's container, where bubblewrap cannot make its namespaces: a uid of their own that the container's
    firewall cuts off the network (orch.run.uids.checks_uid)."""
    RUN_UID = "run-uid"
    """In a run's container under shared isolation, where nothing of the run may switch uid: the run's own uid, which
    every worker of the run already is (orch.lead.changes.uidchecks). Never offered to a strict run."""


@dataclass(frozen=True)
class Placement:
    """Where on a cluster's nodes a run may go (a swarm's: `--constraint`, `--per-node`)."""

    constraints: tuple[str, ...] = ()
    """Placement constraints, each `KEY==VALUE` or `KEY!=VALUE` (`node.labels.zone==eu`)."""
    per_node: int | None = None
    """At most this many runs on one node when this one is placed (None: no cap)."""


@dataclass(frozen=True)
class UpOptions:
    """What the command line said about where a new run lives; each backend takes into its settings what
    concerns it (`Backend.settings`) and leaves the rest (a local run has no image)."""

    boot_timeout: float | None = None
    """How long `up` and `resume` wait for the workers to boot (None: orch.fleet.booting.BOOT_TIMEOUT)."""
    copy: bool = False
    """Give the workers a disposable copy of the workdir."""
    egress: EgressMode | None = None
    """None: the backend's default."""
    allow: tuple[str, ...] = ()
    memory: str = CONTAINER_MEMORY
    cpus: float | None = None
    pids: int = CONTAINER_PIDS
    network: str | None = None
    image: str | None = None
    placement: Placement = Placement()
    lead: bool = False
    """`orch run`: the run's controller runs where its fleet does, started once the spec is pushed."""


class BackendSettings(Strict):
    """What a backend's sandbox starts a run with beyond the UpRequest: each backend's own model, named by
    `backend` (pydantic discriminates them on it), nothing of another backend's in it."""

    backend: str
    boot_timeout: float | None = None
    """How long `up` and `resume` wait for the workers to boot (None: orch.fleet.booting.BOOT_TIMEOUT)."""


class Backend(ABC):
    """One place a run can live. Subclasses set the class facts and implement the abstract methods; the
    defaults are the local machine's."""

    name: ClassVar[str]
    """Its registered name (orch.backends.registry.BACKENDS), the `backend` of its run records and settings."""
    title: ClassVar[str]
    """What a sentence calls it: "the container backend"."""
    about: ClassVar[str]
    """Where its runs live, in a few words (`orch doctor`)."""
    record: ClassVar[type[RunInfoBase]]
    """Its variant of run.json."""
    pinned_agents: ClassVar[bool] = False
    """Its workers run the agent versions orch pins (the worker image's), not this machine's binaries: a
    replayed recording's versions are compared with those (orch.recording.transfer.current_versions)."""
    checks_at_start: ClassVar[bool] = True
    """A run's checks run on its base in the process that starts it, before the run exists (a missing command
    is refused there in one line); False: its controller runs them where it lives, at its start."""
    container: ClassVar[bool] = False
    """Each of its runs lives in a container of its own, whose processes run orch too (`orch serve-run`, the
    controller): inside one, `registry.here()` is this backend."""
    checks: ClassVar[tuple[ChecksSandbox, ...]] = (ChecksSandbox.BWRAP,)
    """Where a controller runs in it (`registry.here()`): the sandboxes a change's checks may run in, the first that
    works here taken (orch.lead.changes.gate); none working: a run with checks is refused in one line."""
    gateway_keeper: ClassVar[bool] = False
    """Where a controller runs in it (`registry.here()`): the run's gateway is another uid's, started by the
    init under a keeper of that uid (orch.container.gatewaykeeper), which starts it again; the controller
    cannot, and ends the run when both are gone. False: the controller starts a dead gateway again itself."""
    comes_home: ClassVar[bool] = False
    """Its run folder here is a copy that `orch run` keeps pulled while it follows the run (a swarm run's passes):
    the run's commentary reads it here, as for a folder that is here."""
    places: ClassVar[bool] = False
    """Its runs go on a cluster's nodes, chosen by placement constraints and a cap per node (`Placement`, a spec's
    `placement:`); the others refuse both in one line."""
    lingers: ClassVar[bool] = False
    """Its runs keep objects of their own past their fleet's end (a swarm run's collector, secrets, network): a
    spec's teardown has them removed (`Sandbox.kill`) even when the fleet is gone."""

    @abstractmethod
    def settings(self, options: UpOptions) -> BackendSettings:
        """Its settings from the command line's options (UsageError, one line, for a bad one)."""

    @abstractmethod
    def sandbox(self, settings: BackendSettings | None = None) -> Sandbox:
        """Where its runs' tmux servers live, seen from this process (None: the default settings)."""

    @abstractmethod
    def shared_note(self) -> str:
        """What a run of it prints when its workers end up sharing one uid."""

    @abstractmethod
    def doctor(self) -> list[Check]:
        """Its lines in `orch doctor`: what it needs on this machine, and the fix for what is missing."""

    def refuse_placement(self, options: UpOptions) -> None:
        """For a backend with no nodes to choose from: `--constraint` and `--per-node` refused in one line."""
        if not self.places and options.placement != Placement():
            raise UsageError(
                f"--constraint and --per-node place a run on a swarm's nodes; {self.title} has none to choose",
                hint="use --backend swarm, or drop them",
            )

    def confinement(self, info: RunInfo) -> Confinement:
        """How the run's workers are kept apart where its tmux server runs, in this process."""
        raise SandboxError(f"run {info.name!r}: its fleet does not run in this process ({self.name})")

    def ready(self, agents: Iterable[str]) -> str | None:
        """None when it can run a fleet of these agents here now; else why not, in one line (`orch demo` then
        runs locally)."""
        return None

    def folder_is_here(self, info: RunInfo) -> bool:
        """The run folder on this machine is the one the fleet writes (not a copy of one elsewhere)."""
        return True

    def strict_possible(self) -> bool:
        """Whether a run it starts from this process can give each worker a uid or sandbox of its own."""
        return True

    def default_isolation(self, agents: Iterable[str]) -> tuple[Isolation, str | None]:
        """`orch up`'s isolation when none is asked, and the one-line note a run that ends up shared prints:
        strict unless an agent of the fleet cannot run strict."""
        from orch.agents.registry import get_adapter

        unable = sorted({agent for agent in agents if not get_adapter(agent).can_run_strict()})
        if unable:
            return Isolation.SHARED, f"{self.shared_note()}: {', '.join(unable)} cannot run strict"
        return Isolation.STRICT, None

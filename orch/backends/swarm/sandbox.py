"""The swarm backend: each run a Swarm service on a node the scheduler picks, its folder coming home through a
collector on the manager, driven through the manager's engine (DOCKER_HOST) alone.

`up` makes the run's objects (orch.backends.swarm.service), its folder here and in the collector
(orch.backends.swarm.home), then starts its first life: a task that restores the folder, runs the container
init as a container of the docker backend does, and pushes the folder home while it runs. `resume` starts a
new life on whichever node Swarm picks, from the folder's last pass. `pull` brings this side's copy up to the
collector's; `kill` stops the task (its last pass comes home first) and removes everything of the run.

What needs the workers' screens (`send`, `brief`, `read`, `attach`, `restart`) is refused in one line that
says which node runs the run: Swarm's manager offers no way into a task on another node.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import docker

from orch.backends.docker import boot, mounts
from orch.backends.docker.engine import DEFAULT_ENGINE, docker_client, engine_address
from orch.backends.docker.image import carried_agents
from orch.backends.swarm import home, service, spec
from orch.backends.swarm.backend import SwarmSettings
from orch.backends.swarm.names import BOOT_SECRET, SYNC_SECRET, check_name, service_name
from orch.backends.swarm.record import SwarmInfo, SwarmLife, SwarmRunInfo
from orch.container import egress
from orch.container.layout import ROOT_HOST_UID, WORKDIR, run_mount
from orch.contracts import OrchCommand, UpRequest
from orch.errors import DeliveryError, OrchError, UsageError, WaitTimeoutError, is_environment_error
from orch.fleet import control, launch
from orch.fleet.booting import BOOT_TIMEOUT
from orch.gateway.credential import FleetUpstreams
from orch.run.folder import RunFolder
from orch.run.records import (
    ContainerInfo,
    DockerRunInfo,
    EgressMode,
    LocalRunInfo,
    RunInfo,
    RunInfoBase,
    RunStatus,
)
from orch.run.statusview import RunStatusView
from orch.settings.user import SWARM_SYNC_INTERVAL
from orch.waits import wait_until

LOST_EXIT = 5
"""A life lost with its node: the controller's own exit for a run that failed (orch.lead.decisions.EXIT_FAILED)."""
FOLLOW_TIMEOUT = 7 * 24 * 3600.0
"""How long `orch run` follows a swarm run at most (a run's own budget and timeouts end it long before)."""
START_MARGIN = 120.0
"""Seconds on top of the boot timeout for a task to start: placement, the restore, the firewall."""
FOLDER_COMMANDS = ("wait", "bus", "run")
"""Commands that only read (or wait on) the run folder: they run here while this copy is pulled."""
PLACING = threading.Lock()
"""Held while a run's task is placed: runs started side by side count each other's tasks."""


@dataclass(frozen=True)
class _Checked:
    """What `SwarmSandbox._checked` found, for `up` to go on with."""

    planned: LocalRunInfo
    allow: list[str]
    client: docker.DockerClient
    address: str
    manager: str
    image_id: str
    recording: Path | None
    exists: bool
    """A run of its name is here or on the swarm (`replace` asked: it goes)."""


class SwarmSandbox:
    """The `Sandbox` of swarm runs (orch.contracts.Sandbox), seen from the user's side of the manager."""

    def __init__(self, settings: SwarmSettings | None = None) -> None:
        self.settings = settings or SwarmSettings()
        given = self.settings.boot_timeout
        self.boot_timeout = BOOT_TIMEOUT if given is None else given
        self._clients: dict[str | None, docker.DockerClient] = {}

    def client(self, info: SwarmRunInfo | None = None) -> docker.DockerClient:
        host = info.swarm.manager if info is not None else None
        if host not in self._clients:
            self._clients[host] = docker_client(base_url=host)
        return self._clients[host]

    # --- up ---------------------------------------------------------------------------------------
    def check(self, request: UpRequest) -> None:
        self._checked(request)

    def _checked(self, request: UpRequest) -> _Checked:
        """Everything `up` refuses, asked of the manager without making anything."""
        check_name(request.name)
        adapter, planned = launch.plan(request)
        opts, run = self.settings.options, RunFolder.for_name(request.name)
        egress.refuse_open_checks(opts.egress, request.isolation, request.checks)  # before the manager is asked
        client, address = self.client(), engine_address()
        manager = service.manager_node(client, address)
        try:
            offline = request.offline or request.replay is not None
            allow = egress.allowlist_for(os.environ, offline, opts.allow, adapter.facts.credentials, model_api=False)
        except ValueError as exc:
            raise UsageError(str(exc), hint="--allow takes a host name, an IP address or a CIDR") from None
        if opts.network:
            service.check_network(client, opts.network)
        boot.check_image(client, self.settings.image, address)
        image = client.images.get(self.settings.image)
        missing = set(planned.agents()) - carried_agents(image)
        if missing:
            raise UsageError(
                f"image {self.settings.image} does not carry agent {', '.join(sorted(missing))}",
                hint=f"build one that does: orch image build --agents {','.join(planned.agents())}",
            )
        recording = _recording(request)
        exists = run.root.exists() or service.exists(client, request.name)
        if exists and not request.replace:
            raise UsageError(f"run {request.name!r} already exists", hint=f"use --replace, or orch kill {request.name}")
        return _Checked(planned, allow, client, address, manager, str(image.id), recording, exists)

    def up(self, request: UpRequest) -> RunInfo:
        checked = self._checked(request)
        planned, client, address, recording = checked.planned, checked.client, checked.address, checked.recording
        opts, run = self.settings.options, RunFolder.for_name(request.name)
        if checked.exists:
            service.remove_run(client, request.name)
            run.remove()
        swarm = SwarmInfo(
            manager=None if address == DEFAULT_ENGINE else address,
            manager_node=checked.manager,
            image=task_image(self.settings.image, checked.image_id),
            workdir=str(planned.workdir),
            options=opts.model_copy(
                update={
                    "allow": checked.allow if opts.egress is EgressMode.ALLOWLIST else [],
                    "worker_uid_base": boot.worker_uid_base(client, request.name, service.taken_uid_bases(client)),
                }
            ),
            constraints=list(self.settings.constraints),
            per_node=self.settings.per_node,
            user=f"{ROOT_HOST_UID}:{ROOT_HOST_UID}",  # the task's own: nothing of this machine is mounted there
            drive=self.settings.drive,
        )
        task_info = task_record(planned, swarm)
        if recording is not None:
            task_info.replay = str(RunFolder(Path(run_mount(request.name))).replay_recording)
        choice = boot.upstream(task_info)  # before anything exists: a bad credential setup creates nothing
        info = SwarmRunInfo.of(task_info, swarm=swarm)
        try:
            network = service.make_network(client, request.name, swarm.options.egress)
            sync = service.make_secret(client, request.name, SYNC_SECRET, 1, service.new_token())
            service.create_service(client, spec.collector_service(info, swarm, 1, sync, network))
            collector = service.collector_container(client, request.name, 1)
            mounts.seed_folder(run, task_info, recording)
            home.seed(collector, run, info, Path(planned.workdir))
            run.write_info(info)
            if not self.settings.drive:
                return self.start(info, choice, request.prompts)
        except BaseException:
            service.remove_run(client, request.name)
            run.remove()
            raise
        return info

    def start(
        self, info: SwarmRunInfo, choice: FleetUpstreams | None = None, prompts: dict[int, str] | None = None
    ) -> SwarmRunInfo:
        """Start the run's next life (its first, or a resume) and wait until its workers run."""
        client, run, swarm = self.client(info), RunFolder.for_name(info.name), info.swarm
        life = len(swarm.lives) + 1
        task_info = task_record(info, swarm)
        fleet = choice or boot.upstream(task_info)  # a resume: the credentials of this side's environment now
        line = boot.boot_line(boot.init_boot(task_info, fleet)).encode()
        boot_secret = service.make_secret(client, info.name, BOOT_SECRET, life, line)
        if life == 1:
            sync = service.secret_id(client, info.name, SYNC_SECRET, 1)
        else:  # a new token, and the collector takes passes from this life alone
            sync = service.make_secret(client, info.name, SYNC_SECRET, life, service.new_token())
            service.update_collector(client, info, swarm, life, sync)
            service.collector_container(client, info.name, life)
        command = spec.serve_command(info.name, self.boot_timeout, swarm.drive, resume=life > 1)
        network = service.network_id(client, info.name)
        with PLACING:  # the nodes' counts hold until this run's task has its node (a per-node cap stays exact)
            constraints = [*swarm.constraints, *service.full_nodes(client, swarm.per_node)]
            task = spec.Task(life, boot_secret, sync, network, command, constraints, prompts or {})
            sid = service.create_service(client, spec.run_service(info, swarm, task))
            node = service.placed(client, sid)
        swarm.lives.append(SwarmLife(life=life, service=sid, node=node))
        swarm.lost = None
        info.status = RunStatus.STARTING
        run.write_info(info)
        return self._wait_running(info)

    def _wait_running(self, info: SwarmRunInfo) -> SwarmRunInfo:
        """Until this side's copy says the workers run (their node's task said so in a pass), or the life
        is lost."""

        def running() -> SwarmRunInfo | None:
            nonlocal info
            info = self.pull_info(info)
            if info.swarm.lost is not None:
                raise DeliveryError(f"run {info.name}: {info.swarm.lost}", hint=f"orch up {info.name} --resume")
            life = info.swarm.life
            return info if info.status is RunStatus.RUNNING or (life is not None and life.ended) else None

        timeout = self.boot_timeout + START_MARGIN
        try:
            return wait_until(running, timeout, f"run {info.name}'s workers on the swarm", interval=1.0)
        except WaitTimeoutError:
            raise WaitTimeoutError(
                f"run {info.name}: workers not running within {timeout:g}s", hint=f"orch kill {info.name}"
            ) from None

    # --- the folder ---------------------------------------------------------------------------------
    def pull_info(self, info: SwarmRunInfo, watch: bool = True) -> SwarmRunInfo:
        """This side's copy brought up to the collector's; the run's record as it now is: the node of its
        life, how that life ended, or (`watch`) why it was lost, with its node."""
        client, run = self.client(info), RunFolder.for_name(info.name)
        collector = service.collector_container(client, info.name)
        pulled = home.pull(home.reader(collector), run, info, home.acker(collector, info))
        info = pulled.info
        life = info.swarm.life
        if life is not None and life.ended is None:
            task = service.task_of(client, life.service)
            if task is not None and task.node_id and not life.node:
                life.node = service.node_name(client, task.node_id)
            if pulled.ended is not None:
                life.ended = f"exit {pulled.ended}"
            elif watch and (why := service.lost(client, life.service)) is not None:
                life.ended = info.swarm.lost = why
                info.status = RunStatus.FAILED
            run.write_info(info)
        return info

    def pull(self, info: RunInfo) -> bool:
        self.pull_info(_boxed(info))
        return True

    def push(self, info: RunInfo, files: list[Path]) -> None:
        """While no life runs (before the first, or a resume), this side's events too (`orch run`'s first line, a
        relaunch): nothing else writes them then, and the passes home would replace this copy's with the collector's."""
        boxed = _boxed(info)
        events = RunFolder.for_name(boxed.name).events
        idle = boxed.swarm.life is None or boxed.swarm.life.ended is not None
        files = [*files, events] if idle and events.is_file() and events not in files else files
        home.push(service.collector_container(self.client(boxed), boxed.name), boxed, files)

    @contextlib.contextmanager
    def pulling(self, info: SwarmRunInfo) -> Iterator[None]:
        """This side's copy kept pulled (every ORCH_SWARM_SYNC_INTERVAL) while the block runs."""
        stop = threading.Event()

        def loop() -> None:
            nonlocal info
            while not stop.wait(SWARM_SYNC_INTERVAL.get()):
                with contextlib.suppress(Exception):
                    info = self.pull_info(info)

        thread = threading.Thread(target=loop, name="orch-swarm-pull", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    # --- commands -----------------------------------------------------------------------------------
    def forward(self, info: RunInfo, command: OrchCommand) -> int:
        boxed = self.pull_info(_boxed(info))
        if command.args[:1] == ["run"] and boxed.swarm.drive and not boxed.swarm.lives:
            boxed = self.start(boxed)
        alive = self.alive(boxed)
        if (command.args[:1] and command.args[0] in FOLDER_COMMANDS) or (command.folder_when_down and not alive):
            if command.args[:1] == ["run"]:
                return self._follow(boxed)
            with self.pulling(boxed):
                return command.run_here()
        life = boxed.swarm.life
        node = life.node if life is not None and life.node else "its node"
        raise DeliveryError(
            f"run {boxed.name} runs on swarm node {node}: `orch {command.args[0]}` needs its workers' screens, "
            "which the manager cannot reach",
            hint=f"on {node}: docker exec -it -u {boxed.swarm.user} $(docker ps -q -f label=orch.run={boxed.name}) "
            f"orch {' '.join(command.args)}",
        )

    def _follow(self, info: SwarmRunInfo) -> int:
        """Until the life ends (its last pass home) or is lost: its exit code."""
        info = self._until_ended(info, FOLLOW_TIMEOUT)
        ended = info.swarm.life.ended if info.swarm.life is not None else None
        return int(ended.removeprefix("exit ")) if ended is not None and ended.startswith("exit ") else LOST_EXIT

    def _until_ended(self, info: SwarmRunInfo, timeout: float, watch: bool = True) -> SwarmRunInfo:
        """This side's copy pulled until the current life ended (`watch`: or was found lost)."""

        def ended() -> SwarmRunInfo | None:
            nonlocal info
            info = self.pull_info(info, watch)
            life = info.swarm.life
            return info if life is not None and life.ended is not None else None

        return wait_until(ended, timeout, f"run {info.name} on the swarm to end", interval=SWARM_SYNC_INTERVAL.get())

    def status(self, run: RunFolder) -> RunStatusView:
        info = self.pull_info(_boxed(run.info()))
        alive = self.alive(info)
        return control.status_view(
            run, info, panes={} if alive else None, why_down=None if alive else info.swarm.lost or "not running"
        )

    def screens(self, info: RunInfo, workers: Sequence[int], lines: int) -> dict[int, str] | None:
        return None

    def alive(self, info: RunInfo) -> bool:
        boxed = _boxed(info)
        life = boxed.swarm.life
        if life is None or life.ended is not None:
            return False
        task = service.task_of(self.client(boxed), life.service)
        return task is not None and task.state == "running" and service.lost(self.client(boxed), life.service) is None

    def state(self, info: RunInfo) -> str:
        boxed = _boxed(info)
        life = boxed.swarm.life
        if life is None:
            return "not started"
        if life.ended is not None:  # after the run, too (`orch ls`): how its life ended, and where
            return f"{life.ended} on {life.node}" if life.node else life.ended
        try:
            task = service.task_of(self.client(boxed), life.service)
        except Exception as exc:  # what the Docker SDK raises untranslated: `orch ls` lists the other runs
            if not isinstance(exc, OrchError) and not is_environment_error(exc):
                raise
            return f"manager unreachable (last on {life.node or '?'})"
        return f"{task.state} on {life.node or '?'}" if task is not None else "gone"

    # --- lives --------------------------------------------------------------------------------------
    def resume(self, name: str) -> RunInfo:
        """The run's next life from its last pass, on whichever node Swarm picks (a lost one is not ready)."""
        run = RunFolder.for_name(name)
        info = self.pull_info(_boxed(run.info()))
        if self.alive(info):
            raise UsageError(f"run {name!r} is still running", hint=f"orch kill {name} first to restart it")
        life = info.swarm.life
        if life is not None:
            service.remove_service(self.client(info), life.service)
            if life.ended is None:
                life.ended = "replaced by a new life"
        run.write_info(info)
        self.push(info, [])  # this side's lines since (the relaunch `orch run --resume` logged) go with the folder
        return self.start(info)

    def kill(self, info: RunInfo) -> None:
        """Stop the task (the controller's teardown, then its last pass home), pull it, remove everything."""
        boxed = _boxed(info)
        client, run = self.client(boxed), RunFolder.for_name(boxed.name)
        life = boxed.swarm.life
        if life is not None and life.ended is None:
            service.remove_service(client, life.service)  # SIGTERM to its task: it ends with its last pass
            with contextlib.suppress(WaitTimeoutError, OrchError):  # a lost node's task says nothing more
                boxed = self._until_ended(boxed, spec.STOP_GRACE + 10, watch=False)
            life = boxed.swarm.life
            if life is not None and life.ended is None:
                life.ended = "killed"
        left = service.remove_run(client, boxed.name)
        boxed.status = RunStatus.STOPPED
        run.write_info(boxed)
        if left:
            raise DeliveryError(
                f"run {boxed.name}: could not remove {', '.join(left)}", hint=f"orch kill {boxed.name} again"
            )


def task_record(info: RunInfoBase, swarm: SwarmInfo) -> DockerRunInfo:
    """The run's record as its task sees it: a container run, there (orch.container.init and serve-run read
    it as they read a container's)."""
    container = ContainerInfo(
        name=service_name(info.name),
        image=swarm.image,
        on_remote_engine=True,
        host_run_dir=run_mount(info.name),
        host_workdir=swarm.workdir,
        user=swarm.user,
        options=swarm.options,
    )
    task_info = DockerRunInfo.of(info, container=container)
    task_info.workdir = WORKDIR
    return task_info


def task_image(name: str, image_id: str) -> str:
    """What the run's tasks run: an image from a registry by its name (each node pulls it), a local one by
    its id, which no node ever tries to pull (from Docker Hub): it must have been loaded there."""
    first = name.split("/", 1)[0]
    from_registry = "/" in name and ("." in first or ":" in first or first == "localhost")
    return name if from_registry else image_id


def _recording(request: UpRequest) -> Path | None:
    """The exported recording a swarm run replays (its file travels in the run folder); a recorded run
    folder is refused: only this machine sees it."""
    if request.replay is None:
        return None
    if not request.replay.is_file():
        raise UsageError(
            f"a swarm run replays an exported recording, and {request.replay} is a run folder",
            hint="export it first (orch record export RUN -o FILE) and replay that file",
        )
    return request.replay.resolve()


def _boxed(info: RunInfo) -> SwarmRunInfo:
    """The run's record as this side's run.json has it now: a caller's copy may predate a life or a pass (`orch
    run` holds the one it read before its forward started the first life), and writing it back would lose them."""
    if not isinstance(info, SwarmRunInfo):
        raise UsageError(f"run {info.name!r} is not a swarm run")
    run = RunFolder.for_name(info.name)
    current = run.info() if run.run_json.is_file() else info
    return current if isinstance(current, SwarmRunInfo) else info

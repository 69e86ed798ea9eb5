"""The docker backend: one disposable, hardened container per run, with the controller inside.

`up` starts ONE container from the orch image. Its first process (orch.container.init, root with a few
capabilities) applies the egress policy, then drops to the run's uid with no capabilities and execs
`orch serve-run NAME`, the controller, which launches tmux and the workers with the same fleet code as
a local run and stays until SIGTERM. The run folder is bind-mounted from the host (or, on a remote
engine, is a labelled volume there), so the host reads bus, results and done flags as plain files.

Host vs container paths: run.json holds the paths the controller and workers use (`/workspace`,
`/orch/runs/NAME`); `DockerRunInfo.container` keeps the host's side (see orch.run.records.ContainerInfo).

The pieces: orch.container.layout (names, labels, in-container paths, uid), orch.backends.docker.boot (create,
wait, describe), orch.backends.docker.mounts (run folder and workspace: bind mounts or remote volumes, pull) and
orch.backends.docker.exec_run (commands in the container), orch.backends.docker.removal (--replace's old run, a failed
up's leftovers); this module puts them together behind the Sandbox contract. orch.backends.docker.reap removes
what crashed runs left on an engine.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
import requests.exceptions
from docker.models.containers import Container
from pydantic import TypeAdapter

from orch.backends.docker import boot, mounts, removal
from orch.backends.docker.backend import DockerSettings
from orch.backends.docker.boot import check_image, describe, find, run_container
from orch.backends.docker.engine import DEFAULT_ENGINE, docker_client, engine_address, is_remote_client
from orch.backends.docker.exec_run import Exec, exec_argv
from orch.backends.docker.image import carried_agents
from orch.backends.docker.mounts import save_info
from orch.container import egress
from orch.container.layout import (
    LABEL_MANAGED,
    WORKDIR,
    container_name,
    container_user,
    run_mount,
    run_volume_name,
    workspace_volume_name,
    writable_by,
)
from orch.contracts import OrchCommand, UpRequest
from orch.errors import DeliveryError, OrchError, SandboxError, UsageError
from orch.fleet import control, launch
from orch.fleet.booting import BOOT_TIMEOUT
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.paths import workspaces_dir
from orch.run.records import (
    ContainerInfo,
    ControllerEvent,
    DockerRunInfo,
    EgressMode,
    Isolation,
    LocalRunInfo,
    RunInfo,
    RunStatus,
)
from orch.run.statusview import RunStatusView

STOP_TIMEOUT = 15


@dataclass(frozen=True)
class _Checked:
    """What `DockerSandbox._checked` found, for `up` to go on with."""

    planned: LocalRunInfo
    allow: list[str]
    client: docker.DockerClient
    remote: bool
    uid: int
    gid: int


class DockerSandbox:
    """The `Sandbox` of containerised runs (orch.contracts.Sandbox), seen from outside their containers."""

    def __init__(self, settings: DockerSettings | None = None) -> None:
        self.settings = settings or DockerSettings()
        timeout = self.settings.boot_timeout
        self.boot_timeout = BOOT_TIMEOUT if timeout is None else timeout
        self._clients: dict[str | None, docker.DockerClient] = {}

    # --- engines ---------------------------------------------------------------------------------
    def client(self, info: DockerRunInfo | None = None) -> docker.DockerClient:
        """The engine of a run (the one it was started on), or the environment's for a new run.

        One client per engine for this object's life: over ssh every new connection costs a handshake.
        """
        host = info.container.docker_host if info is not None else None
        if host not in self._clients:
            self._clients[host] = docker_client(base_url=host)
        return self._clients[host]

    # --- up ---------------------------------------------------------------------------------------
    def check(self, request: UpRequest) -> None:
        self._checked(request)

    def _checked(self, request: UpRequest) -> _Checked:
        """Everything `up` refuses, asked of the engine without making anything."""
        adapter, planned = launch.plan(request)  # the agent itself runs inside the container
        opts = self.settings.options
        egress.refuse_open_checks(opts.egress, request.isolation, request.checks)
        try:
            # The model API is not the workers': the init opens it to the gateway's uid alone.
            offline = request.offline or _recording(request) is not None
            allow = egress.allowlist_for(os.environ, offline, opts.allow, adapter.facts.credentials, model_api=False)
        except ValueError as exc:
            raise UsageError(str(exc), hint="--allow takes a host name, an IP address or a CIDR") from None
        client = self.client()
        remote = is_remote_client(client)
        if remote and not opts.copy_workdir:
            raise UsageError(
                f"the Docker engine at {engine_address()} is remote: it cannot bind-mount the local path "
                f"{planned.workdir}",
                hint="pass --copy to upload a copy of the workdir to a volume on that engine",
            )
        check_image(client, self.settings.image)
        missing = set(planned.agents()) - carried_agents(client.images.get(self.settings.image))
        if missing:
            raise UsageError(
                f"image {self.settings.image} does not carry agent {', '.join(sorted(missing))}",
                hint=f"build one that does: orch image build --agents {','.join(planned.agents())}",
            )
        existing = find(client, container_name(request.name))
        if existing is not None and existing.labels.get(LABEL_MANAGED) != "true":
            raise UsageError(
                f"a container named {container_name(request.name)} exists that orch did not create",
                hint="pick another run name, or remove that container yourself",
            )
        if (existing is not None or RunFolder.for_name(request.name).root.exists()) and not request.replace:
            what = f"container {container_name(request.name)}" if existing is not None else "run folder"
            raise UsageError(
                f"run {request.name!r} already exists ({what})",
                hint=f"use --replace, `orch up {request.name} --resume`, or `orch kill {request.name}`",
            )
        host_workdir = Path(planned.workdir)
        uid, gid = container_user(host_workdir, opts.copy_workdir)
        read_only = request.isolation is Isolation.STRICT  # the workers only read the tree then
        if not opts.copy_workdir and not read_only and not writable_by(host_workdir, uid, gid):
            raise UsageError(
                f"the workers run as uid {uid} and cannot write the workdir {host_workdir}",
                hint="pass --copy to give them a disposable copy, or make the workdir writable by that uid",
            )
        return _Checked(planned, allow if opts.egress is EgressMode.ALLOWLIST else [], client, remote, uid, gid)

    def up(self, request: UpRequest) -> RunInfo:
        checked = self._checked(request)
        planned, allow, client, remote = checked.planned, checked.allow, checked.client, checked.remote
        opts = self.settings.options
        host_workdir = Path(planned.workdir)
        recording = _recording(request)
        address = engine_address()
        uid, gid = checked.uid, checked.gid
        run = RunFolder.for_name(request.name)
        if find(client, container_name(request.name)) is not None or run.root.exists():
            removal.replace_run(client, request.name, run)  # --replace (_checked refused it otherwise)
        container_info = ContainerInfo(
            name=container_name(request.name),
            image=self.settings.image,
            docker_host=None if address == DEFAULT_ENGINE else address,
            on_remote_engine=remote,
            host_run_dir=run_volume_name(request.name) if remote else str(run.root),
            host_workdir=str(host_workdir),
            workspace_source=(
                workspace_volume_name(request.name)
                if remote
                else str(workspaces_dir() / request.name)
                if opts.copy_workdir
                else str(host_workdir)
            ),
            run_volume=run_volume_name(request.name) if remote else None,
            user=f"{uid}:{gid}",
            options=opts.model_copy(update={"allow": allow}),  # its uid range: claimed as it is created
        )
        info = DockerRunInfo.of(planned, container=container_info)
        info.workdir = WORKDIR
        if recording is not None:  # the gateway in the container reads the run folder's copy
            info.replay = str(RunFolder(Path(run_mount(request.name))).replay_recording)
        choice = boot.upstream(info)  # before anything exists: a bad credential setup creates nothing
        container: Container | None = None
        try:
            if remote:
                mounts.make_volumes(client, info)
            else:
                mounts.make_run_folder(run, info, recording)
                if opts.copy_workdir:
                    mounts.copy_workdir(host_workdir, Path(info.container.workspace_source), uid, gid)
            create = functools.partial(
                boot.create, client, info, request.prompts, resume=False, boot_timeout=self.boot_timeout, choice=choice
            )
            container = boot.create_on_a_range(client, info, create)
            info.container.id = str(container.id)
            if remote:
                mounts.upload(container, info, host_workdir, recording)
            save_info(run, info)
            boot.start(client, container, info, choice)
            boot.wait_running(container, run, info, self.boot_timeout)
        except BaseException:
            removal.failed_up(client, container, run, info)
            raise
        return self._started(run, info)

    def resume(self, name: str) -> RunInfo:
        """Start a new container on an existing run folder and relaunch the workers (sessions resumed)."""
        run = RunFolder.for_name(name)
        info = _boxed(run.info())
        client = self.client(info)
        old = run_container(client, info)
        if old is not None:
            old.reload()
            if old.status == "running":
                raise UsageError(f"run {name!r} is still running", hint=f"orch kill {name} first to restart it")
            old.remove(force=True)
        ci = info.container
        if not ci.on_remote_engine and not Path(ci.host_run_dir).is_dir():
            raise UsageError(f"the run folder {ci.host_run_dir} is gone", hint="start a new run")
        if not ci.on_remote_engine and not Path(ci.workspace_source).is_dir():
            raise UsageError(f"the workspace {ci.workspace_source} is gone", hint="start a new run")
        check_image(client, ci.image, ci.docker_host or DEFAULT_ENGINE)
        choice = boot.upstream(info)  # the credential of this resume's environment
        container = boot.create(client, info, {}, resume=True, boot_timeout=self.boot_timeout, choice=choice)
        ci.id = str(container.id)
        info.status = RunStatus.STARTING
        save_info(run, info)
        if not ci.on_remote_engine:
            run.log_event(ControllerEvent(event=Event.RESUMED, data={"container": ci.id[:12]}))
        try:
            boot.start(client, container, info, choice)
            boot.wait_running(container, run, info, self.boot_timeout)
        except BaseException:
            with contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException):
                container.remove(force=True)
            raise
        return self._started(run, info)

    @staticmethod
    def _started(run: RunFolder, info: DockerRunInfo) -> RunInfo:
        """run.json once the workers run: the controller wrote it, or on a remote engine, this local copy."""
        if info.container.on_remote_engine:
            info.status = RunStatus.RUNNING
            save_info(run, info)
            return info
        return run.info()

    # --- commands inside the container ------------------------------------------------------------
    def _running(self, info: DockerRunInfo) -> tuple[docker.DockerClient, Container]:
        client = self.client(info)
        container = run_container(client, info)
        if container is None or container.status != "running":
            why = describe(container)
            raise DeliveryError(f"run {info.name!r}: its container is {why}", hint=f"orch up {info.name} --resume")
        return client, container

    def _exec(self, info: DockerRunInfo, argv: list[str], stdin: str | None = None) -> Exec:
        """A `docker exec` of argv in the run's running container, as the run's user."""
        client, container = self._running(info)
        return Exec(client, container, info.container.user, argv, stdin)

    def forward(self, info: RunInfo, command: OrchCommand) -> int:
        info = _boxed(info)
        if command.folder_when_down and not info.container.on_remote_engine and not self.alive(info):
            return command.run_here()
        args = ["orch", *command.args]
        if command.interactive:
            self._running(info)
            exec_argv(info, args)
        run = self._exec(info, args, command.stdin)
        for stream, chunk in run.frames():
            out = sys.stdout if stream == 1 else sys.stderr
            out.write(chunk.decode(errors="replace"))
            out.flush()
        return run.exit_code()

    def capture(self, info: DockerRunInfo, args: list[str]) -> str:
        """Run `orch ARGS` in the run's container and return its stdout (OrchError on failure)."""
        run = self._exec(info, ["orch", *args])
        out, err = bytearray(), bytearray()
        for stream, chunk in run.frames():
            (out if stream == 1 else err).extend(chunk)
        code = run.exit_code()
        if code != 0:
            text = err.decode(errors="replace").strip().splitlines()
            raise SandboxError(f"`orch {' '.join(args)}` failed in the container: {text[-1] if text else code}")
        return out.decode(errors="replace")

    def run_as_user(self, info: RunInfo, argv: list[str]) -> tuple[int, str]:
        """Run any command in the run's container as its user; (exit code, stdout+stderr). For checks."""
        run = self._exec(_boxed(info), argv)
        output = b"".join(chunk for _, chunk in run.frames())
        return run.exit_code(), output.decode(errors="replace")

    def status(self, run: RunFolder) -> RunStatusView:
        info = _boxed(run.info())
        try:
            state = self._describe(info)
            why = None if state == "running" else f"container {state}"
        except OrchError as exc:
            why = f"engine unreachable: {exc.message}"
        if why is not None:
            return control.status_view(run, info, panes=None, why_down=why)
        # `orch status --json`'s shape (orch.cli.outputs.StatusOutput, a layer above this one): its runs.
        shown = json.loads(self.capture(info, ["status", info.name, "--json"]))
        return TypeAdapter(list[RunStatusView]).validate_python(shown["runs"])[0]

    def screens(self, info: RunInfo, workers: Sequence[int], lines: int) -> dict[int, str] | None:
        return None  # a capture is an exec into the container: `orch read` (forwarded) shows one worker

    def alive(self, info: RunInfo) -> bool:
        boxed = _boxed(info)
        container = run_container(self.client(boxed), boxed)
        return container is not None and container.status == "running"

    def state(self, info: RunInfo) -> str:
        try:
            return self._describe(_boxed(info))
        except OrchError:
            return "engine unreachable"

    def _describe(self, info: DockerRunInfo) -> str:
        """The container's state: running, exited (137), removed (OrchError: the engine did not answer)."""
        return describe(run_container(self.client(info), info))

    # --- teardown ---------------------------------------------------------------------------------
    def kill(self, info: RunInfo) -> None:
        """Stop (SIGTERM: the controller stops tmux and marks the run stopped) and remove the container.

        The run folder stays; on a remote engine it is pulled back first. A `--copy` workspace goes.
        """
        info = _boxed(info)
        ci = info.container
        client = self.client(info)
        container = run_container(client, info)
        run = RunFolder.for_name(info.name)
        if container is not None:
            with contextlib.suppress(docker.errors.APIError):
                container.stop(timeout=STOP_TIMEOUT)
        if ci.on_remote_engine:
            with contextlib.suppress(OrchError):
                self.pull(info)
        if container is not None:
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)
        mounts.reclaim_run_folder(client, info)  # model/ and the workers' files become yours again
        if ci.options.copy_workdir:
            if ci.on_remote_engine:
                mounts.remove_volumes(client, workspace_volume_name(info.name))
            else:
                shutil.rmtree(ci.workspace_source, ignore_errors=True)
        current = run.info()
        current.status = RunStatus.STOPPED
        save_info(run, current)
        run.log_event(ControllerEvent(event=Event.CONTAINER_REMOVED, data={"container": ci.id[:12]}))

    def push(self, info: RunInfo, files: list[Path]) -> None:
        """On a remote engine: put these local run-folder files into the run's folder there (the run's
        container must be running). A local engine's container sees this folder through its bind mount."""
        info = _boxed(info)
        if info.container.on_remote_engine:
            _, container = self._running(info)
            mounts.push(container, info, files)

    def pull(self, info: RunInfo) -> bool:
        """On a remote engine: copy the run's folder back into the local one (files only ever added or updated)."""
        info = _boxed(info)
        if not info.container.on_remote_engine:
            return False
        client = self.client(info)
        mounts.pull(client, info, run_container(client, info))
        return True


def _recording(request: UpRequest) -> Path | None:
    """The exported recording a container run replays (copied into its run folder, where its gateway reads
    it); a recorded run folder is refused: only this machine sees it."""
    if request.replay is None:
        return None
    if not request.replay.is_file():
        raise UsageError(
            f"a container run replays an exported recording, and {request.replay} is a run folder",
            hint="export it first (orch record export RUN -o FILE) and replay that file, or replay with --local",
        )
    return request.replay.resolve()


def _boxed(info: RunInfo) -> DockerRunInfo:
    """The run's record as a container run (orch.backends.registry hands this sandbox no other)."""
    if not isinstance(info, DockerRunInfo):
        raise UsageError(f"run {info.name!r} is not a container run", hint=f"orch up {info.name} --resume --local")
    return info

"""The docker backend: one disposable, hardened container per run, with the controller inside.

`up` starts ONE container from the orch image. Its first process (orch.container.init, root with a few
capabilities) applies the egress policy, then drops to the run's uid with no capabilities and execs
`orch serve-run NAME`, the controller, which launches tmux and the workers with the same fleet code as
a local run and stays until SIGTERM. The run folder is bind-mounted from the host (or, on a remote
engine, is a labelled volume there), so the host reads bus, results and done flags as plain files.

Host vs container paths: run.json holds the paths the controller and workers use (`/workspace`,
`/orch/runs/NAME`); `RunInfo.container` keeps the host's side (see orch.run.records.ContainerInfo).

The pieces: orch.container.layout (names, labels, in-container paths, uid), orch.container.boot (create,
wait, describe), orch.container.mounts (run folder and workspace: bind mounts or remote volumes, pull) and
orch.container.exec_run (commands in the container); this module puts them together behind the Sandbox contract.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors
import requests.exceptions
from docker.models.containers import Container

from orch.container import boot, egress, mounts
from orch.container.boot import check_image, describe, find, run_container
from orch.container.engine import DEFAULT_ENGINE, docker_client, engine_address, is_remote_client
from orch.container.exec_run import Exec, exec_argv
from orch.container.layout import (
    LABEL_MANAGED,
    LABEL_ROLE,
    LABEL_RUN,
    ROLE_RUN_FOLDER,
    WORKDIR,
    container_name,
    container_user,
    run_volume_name,
    run_volumes,
    workspace_volume_name,
    writable_by,
)
from orch.container.mounts import save_info
from orch.contracts import UpRequest
from orch.errors import DeliveryError, OrchError, SandboxError, UsageError
from orch.fleet import launch
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.paths import workspaces_dir
from orch.run.records import Backend, ContainerInfo, ContainerOptions, ControllerEvent, EgressMode, RunInfo, RunStatus
from orch.settings import IMAGE

STOP_TIMEOUT = 15


def default_image() -> str:
    return IMAGE.get()


@dataclass(frozen=True)
class DockerSettings:
    """What `orch up` asks of the docker backend beyond the UpRequest."""

    image: str = field(default_factory=default_image)
    options: ContainerOptions = field(default_factory=ContainerOptions)
    boot_timeout: float = launch.BOOT_TIMEOUT


class DockerSandbox:
    """The `Sandbox` of containerised runs (orch.contracts.Sandbox), plus reap and pull."""

    def __init__(self, settings: DockerSettings | None = None) -> None:
        self.settings = settings or DockerSettings()
        self._clients: dict[str | None, docker.DockerClient] = {}

    # --- engines ---------------------------------------------------------------------------------
    def client(self, info: RunInfo | None = None) -> docker.DockerClient:
        """The engine of a run (the one it was started on), or the environment's for a new run.

        One client per engine for this object's life: over ssh every new connection costs a handshake.
        """
        host = info.container.docker_host if info is not None and info.container is not None else None
        if host not in self._clients:
            self._clients[host] = docker_client(base_url=host)
        return self._clients[host]

    # --- up ---------------------------------------------------------------------------------------
    def up(self, request: UpRequest) -> RunInfo:
        adapter, info = launch.plan(request, Backend.DOCKER)  # the agent itself runs inside the container
        opts = self.settings.options
        host_workdir = Path(info.workdir)
        try:
            allow = egress.allowlist_for(os.environ, request.offline, opts.allow, adapter.credentials)
        except ValueError as exc:
            raise UsageError(str(exc), hint="--allow takes a host name, an IP address or a CIDR") from None
        if opts.egress is not EgressMode.ALLOWLIST:
            allow = []
        client = self.client()
        remote = is_remote_client(client)
        address = engine_address()
        if remote and not opts.copy_workdir:
            raise UsageError(
                f"the Docker engine at {address} is remote: it cannot bind-mount the local path {host_workdir}",
                hint="pass --copy to upload a copy of the workdir to a volume on that engine",
            )
        check_image(client, self.settings.image)
        run = RunFolder.for_name(request.name)
        existing = find(client, container_name(request.name))
        if existing is not None and existing.labels.get(LABEL_MANAGED) != "true":
            raise UsageError(
                f"a container named {container_name(request.name)} exists that orch did not create",
                hint="pick another run name, or remove that container yourself",
            )
        if existing is not None or run.root.exists():
            if not request.replace:
                what = f"container {container_name(request.name)}" if existing is not None else "run folder"
                raise UsageError(
                    f"run {request.name!r} already exists ({what})",
                    hint=f"use --replace, `orch up {request.name} --resume`, or `orch kill {request.name}`",
                )
            self._remove_all(client, request.name, run)

        uid, gid = container_user(host_workdir, opts.copy_workdir)
        if not opts.copy_workdir and not writable_by(host_workdir, uid, gid):
            raise UsageError(
                f"the workers run as uid {uid} and cannot write the workdir {host_workdir}",
                hint="pass --copy to give them a disposable copy, or make the workdir writable by that uid",
            )
        info.workdir = WORKDIR
        info.container = ContainerInfo(
            name=container_name(request.name),
            image=self.settings.image,
            docker_host=None if address == DEFAULT_ENGINE else address,
            remote=remote,
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
            options=opts.model_copy(update={"allow": allow}),
        )
        container: Container | None = None
        try:
            if remote:
                mounts.make_volumes(client, info)
            else:
                mounts.make_run_folder(run, info)
                if opts.copy_workdir:
                    mounts.copy_workdir(host_workdir, Path(info.container.workspace_source), uid, gid)
            container = boot.create(
                client, info, request.prompts, resume=False, boot_timeout=self.settings.boot_timeout
            )
            info.container.id = str(container.id)
            if remote:
                mounts.upload(container, info, host_workdir)
            save_info(run, info)
            container.start()
            boot.wait_running(container, run, info, self.settings.boot_timeout)
        except BaseException:
            self._cleanup_failed_up(client, container, run, info)
            raise
        return self._started(run, info)

    def resume(self, name: str) -> RunInfo:
        """Start a new container on an existing run folder and relaunch the workers (sessions resumed)."""
        run = RunFolder.for_name(name)
        info = run.info()
        if info.backend is not Backend.DOCKER or info.container is None:
            raise UsageError(f"run {name!r} is not a container run", hint=f"orch up {name} --resume --local")
        client = self.client(info)
        old = run_container(client, info)
        if old is not None:
            old.reload()
            if old.status == "running":
                raise UsageError(f"run {name!r} is still running", hint=f"orch kill {name} first to restart it")
            old.remove(force=True)
        ci = info.container
        if not ci.remote and not Path(ci.host_run_dir).is_dir():
            raise UsageError(f"the run folder {ci.host_run_dir} is gone", hint="start a new run")
        if not ci.remote and not Path(ci.workspace_source).is_dir():
            raise UsageError(f"the workspace {ci.workspace_source} is gone", hint="start a new run")
        check_image(client, ci.image, ci.docker_host or DEFAULT_ENGINE)
        container = boot.create(client, info, {}, resume=True, boot_timeout=self.settings.boot_timeout)
        ci.id = str(container.id)
        info.status = RunStatus.STARTING
        save_info(run, info)
        if not ci.remote:
            run.log_event(ControllerEvent(event=Event.RESUMED, data={"container": ci.id[:12]}))
        try:
            container.start()
            boot.wait_running(container, run, info, self.settings.boot_timeout)
        except BaseException:
            with contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException):
                container.remove(force=True)
            raise
        return self._started(run, info)

    @staticmethod
    def _started(run: RunFolder, info: RunInfo) -> RunInfo:
        """run.json once the workers run: the controller wrote it, or on a remote engine, this local copy."""
        assert info.container is not None
        if info.container.remote:
            info.status = RunStatus.RUNNING
            save_info(run, info)
            return info
        return run.info()

    def _remove_all(self, client: docker.DockerClient, name: str, run: RunFolder) -> None:
        """--replace: the old container, its volumes and workspace copy, and the run folder."""
        with contextlib.suppress(OrchError):
            old = run.info()
            if old.backend is Backend.LOCAL:
                launch.server_for(old).kill()
        existing = find(client, container_name(name))
        if existing is not None:
            existing.remove(force=True)
        mounts.remove_volumes(client, *run_volumes(name))
        shutil.rmtree(workspaces_dir() / name, ignore_errors=True)
        run.remove()

    def _cleanup_failed_up(
        self, client: docker.DockerClient, container: Container | None, run: RunFolder, info: RunInfo
    ) -> None:
        """Nothing half-created: the container, volumes, workspace copy and run folder go."""
        with contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException):
            if container is not None:
                container.remove(force=True)
            else:
                found = find(client, container_name(info.name))
                if found is not None and found.labels.get(LABEL_RUN) == info.name:
                    found.remove(force=True)
        with contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException):
            if info.container is not None and info.container.remote:
                mounts.remove_volumes(client, *run_volumes(info.name))
        if info.container is not None and info.container.options.copy_workdir and not info.container.remote:
            shutil.rmtree(info.container.workspace_source, ignore_errors=True)
        run.remove()

    # --- commands inside the container ------------------------------------------------------------
    def _running(self, info: RunInfo) -> tuple[docker.DockerClient, Container]:
        client = self.client(info)
        container = run_container(client, info)
        if container is None or container.status != "running":
            why = describe(container)
            raise DeliveryError(f"run {info.name!r}: its container is {why}", hint=f"orch up {info.name} --resume")
        return client, container

    def _exec(self, info: RunInfo, argv: list[str], stdin: str | None = None) -> Exec:
        """A `docker exec` of argv in the run's running container, as the run's user."""
        assert info.container is not None
        client, container = self._running(info)
        return Exec(client, container, info.container.user, argv, stdin)

    def forward(self, info: RunInfo, args: list[str], stdin: str | None = None, interactive: bool = False) -> int:
        if interactive:
            self._running(info)
            exec_argv(info, ["orch", *args])
        run = self._exec(info, ["orch", *args], stdin)
        for stream, chunk in run.frames():
            out = sys.stdout if stream == 1 else sys.stderr
            out.write(chunk.decode(errors="replace"))
            out.flush()
        return run.exit_code()

    def capture(self, info: RunInfo, args: list[str]) -> str:
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
        run = self._exec(info, argv)
        output = b"".join(chunk for _, chunk in run.frames())
        return run.exit_code(), output.decode(errors="replace")

    def alive(self, info: RunInfo) -> bool:
        container = run_container(self.client(info), info)
        return container is not None and container.status == "running"

    def state(self, info: RunInfo) -> str:
        """The container's state for `orch ls` / `orch status`: running, exited (137), removed."""
        return describe(run_container(self.client(info), info))

    # --- teardown ---------------------------------------------------------------------------------
    def kill(self, info: RunInfo) -> None:
        """Stop (SIGTERM: the controller stops tmux and marks the run stopped) and remove the container.

        The run folder stays; on a remote engine it is pulled back first. A `--copy` workspace goes.
        """
        assert info.container is not None
        ci = info.container
        client = self.client(info)
        container = run_container(client, info)
        run = RunFolder.for_name(info.name)
        if container is not None:
            with contextlib.suppress(docker.errors.APIError):
                container.stop(timeout=STOP_TIMEOUT)
        if ci.remote:
            with contextlib.suppress(OrchError):
                info = self.pull(info)
        if container is not None:
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)
        if ci.options.copy_workdir:
            if ci.remote:
                mounts.remove_volumes(client, workspace_volume_name(info.name))
            else:
                shutil.rmtree(ci.workspace_source, ignore_errors=True)
        current = run.info()
        current.status = RunStatus.STOPPED
        save_info(run, current)
        run.log_event(ControllerEvent(event=Event.CONTAINER_REMOVED, data={"container": ci.id[:12]}))

    def reap(self) -> list[str]:
        """Remove what crashed or stopped runs left on the engine (by label); return what was removed.

        A container goes when it is not running, or its run is stopped or unknown-and-dead, or it is not
        the container its run.json names. A running container of a run this machine does not know is
        left alone (another machine may own it). A run's volumes go once its run is stopped (and, for
        the run folder, pulled since); `--copy` workspaces of stopped or vanished runs go too.
        """
        client = self.client()
        removed: list[str] = []
        filters: dict[str, str | list[str] | bool] = {"label": f"{LABEL_MANAGED}=true"}
        for container in client.containers.list(all=True, filters=filters):
            name = container.labels.get(LABEL_RUN, "")
            info = _known_run(name)
            running = container.status == "running"
            ours = info is not None and info.container is not None and info.container.id == container.id
            stopped = info is not None and info.status in (RunStatus.STOPPED, RunStatus.FAILED)
            if running and (info is None or (ours and not stopped)):
                continue
            with contextlib.suppress(docker.errors.NotFound):  # another reap got there first
                container.remove(force=True)
            removed.append(f"container {container.name} (run {name}, {container.status})")
            if ours and info is not None and not stopped:
                run = RunFolder.for_name(name)
                info.status = RunStatus.STOPPED
                save_info(run, info)
                run.log_event(ControllerEvent(event=Event.REAPED, data={"container": container.short_id}))
        in_use = {m.get("Name") for c in client.containers.list(all=True) for m in c.attrs.get("Mounts", [])}
        for volume in client.volumes.list(filters=filters):
            name = (volume.attrs.get("Labels") or {}).get(LABEL_RUN, "")
            info = _known_run(name)
            if volume.name in in_use or info is None or info.status is not RunStatus.STOPPED:
                continue
            pulled = info.container is not None and info.container.last_pull is not None
            if (volume.attrs.get("Labels") or {}).get(LABEL_ROLE) == ROLE_RUN_FOLDER and not pulled:
                continue
            with contextlib.suppress(docker.errors.NotFound):
                volume.remove(force=True)
            removed.append(f"volume {volume.name} (run {name})")
        if workspaces_dir().is_dir():
            for copy in workspaces_dir().iterdir():
                info = _known_run(copy.name)
                if info is None or info.status is RunStatus.STOPPED:
                    shutil.rmtree(copy, ignore_errors=True)
                    removed.append(f"workspace copy {copy}")
        return removed

    def push(self, info: RunInfo, files: list[Path]) -> None:
        """Put these local run-folder files into a remote run's folder (the run's container must be running)."""
        _, container = self._running(info)
        mounts.push(container, info, files)

    def pull(self, info: RunInfo) -> RunInfo:
        """Copy a remote run's folder back into the local one (files only ever added or updated)."""
        assert info.container is not None
        if not info.container.remote:
            return info
        client = self.client(info)
        return mounts.pull(client, info, run_container(client, info))


def _known_run(name: str) -> RunInfo | None:
    try:
        return RunFolder.for_name(name).info()
    except OrchError:
        return None

"""The docker backend: one disposable, hardened container per run, with the controller inside.

`up` starts ONE container from the orch image. Its first process (orch.containerinit, root with a few
capabilities) applies the egress policy, then drops to the run's uid with no capabilities and execs
`orch serve-run NAME`, the controller, which launches tmux and the workers with the same fleet code as
a local run and stays until SIGTERM. The run folder is bind-mounted from the host (or, on a remote
engine, is a labelled volume there), so the host reads bus, results and done flags as plain files.

Host vs container paths: run.json holds the paths the controller and workers use (`/workspace`,
`/orch/runs/NAME`); `RunInfo.container` keeps the host's side (see orch.models.ContainerInfo).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import shutil
import socket
import stat
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal, NoReturn

import docker
import docker.errors
import requests.exceptions
from docker.models.containers import Container
from docker.types import Mount
from docker.utils.socket import frames_iter

from orch import egress, fleet
from orch.agents.claude import CREDENTIAL_ENV, user_credentials_file
from orch.containerinit import CREDENTIALS_MOUNT
from orch.contracts import UpRequest
from orch.dockerenv import DEFAULT_ENGINE, docker_client, engine_address, explain, is_remote_client
from orch.errors import DeliveryError, OrchError, SandboxError, UsageError, WaitTimeoutError
from orch.models import Backend, ContainerInfo, ContainerOptions, ControllerEvent, EgressMode, RunInfo, RunStatus
from orch.paths import workspaces_dir
from orch.serverun import READY_LINE
from orch.versions import DEFAULT_IMAGE_TAG
from orch.waits import wait_until
from orch.workspace import RunFolder

log = logging.getLogger(__name__)

# Labels on everything orch creates on an engine, so leftovers can be found (`orch reap`).
LABEL_RUN = "orch.run"
LABEL_MANAGED = "orch.managed"
LABEL_ROLE = "orch.role"
ROLE_CONTAINER, ROLE_RUN_FOLDER, ROLE_WORKSPACE, ROLE_HELPER = "run", "run-folder", "workspace", "helper"

# Inside the container.
RUNS_MOUNT = "/orch/runs"
WORKDIR = "/workspace"
HOME = "/home/worker"
AGENTS_DIR = f"{HOME}/.orch/agents"
PYTHON = "/opt/orch/bin/python"
TINI = "/usr/bin/tini"
# What the init step needs before it drops them all: the firewall (NET_*), becoming the run's uid
# (SETUID/SETGID), emptying the bounding set (SETPCAP), handing mount points and the credentials copy
# to that uid (CHOWN, DAC_OVERRIDE: the tmpfs home is the uid's, mode 0700).
INIT_CAPS = ["SETUID", "SETGID", "SETPCAP", "CHOWN", "DAC_OVERRIDE"]
FIREWALL_CAPS = ["NET_ADMIN", "NET_RAW"]
TMPFS_OPTS = "rw,exec,nosuid,nodev"
TMPFS_SIZE = "2g"
ROOT_HOST_UID = 1000
START_MARGIN = 60.0  # seconds on top of the boot timeout: container start, firewall, model server
STOP_TIMEOUT = 15
IMAGE_ENV = "ORCH_IMAGE"


def container_name(name: str) -> str:
    return f"orch-{name}"


def run_volume_name(name: str) -> str:
    return f"orch-run-{name}"


def workspace_volume_name(name: str) -> str:
    return f"orch-workspace-{name}"


def run_volumes(name: str) -> dict[str, str]:
    """A remote run's volumes (name: role): its run folder and its workspace."""
    return {run_volume_name(name): ROLE_RUN_FOLDER, workspace_volume_name(name): ROLE_WORKSPACE}


def run_mount(name: str) -> str:
    """The run folder inside the container."""
    return f"{RUNS_MOUNT}/{name}"


def labels(name: str, role: str) -> dict[str, str]:
    return {LABEL_RUN: name, LABEL_MANAGED: "true", LABEL_ROLE: role}


def default_image() -> str:
    return os.environ.get(IMAGE_ENV) or DEFAULT_IMAGE_TAG


def container_user(workdir: Path, copy: bool, uid: int | None = None, gid: int | None = None) -> tuple[int, int]:
    """The uid:gid a run's container runs as: the invoking user's, never root.

    Invoked as root, the run takes the owner of the workdir when that is not root (so the workers can
    write there and files stay that user's), else 1000:1000.
    """
    uid = os.getuid() if uid is None else uid
    gid = os.getgid() if gid is None else gid
    if uid != 0:
        return uid, gid
    if not copy:
        st = workdir.stat()
        if st.st_uid != 0:
            return st.st_uid, st.st_gid if st.st_gid != 0 else st.st_uid
    return ROOT_HOST_UID, ROOT_HOST_UID


def writable_by(path: Path, uid: int, gid: int) -> bool:
    st = path.stat()
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IWUSR)
    if st.st_gid == gid:
        return bool(st.st_mode & stat.S_IWGRP)
    return bool(st.st_mode & stat.S_IWOTH)


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    os.chown(root, uid, gid, follow_symlinks=False)
    for dirpath, dirnames, filenames in os.walk(root):
        for item in (*dirnames, *filenames):
            os.chown(os.path.join(dirpath, item), uid, gid, follow_symlinks=False)


def _uid_gid(info: ContainerInfo) -> tuple[int, int]:
    uid, _, gid = info.user.partition(":")
    return int(uid), int(gid or uid)


@dataclass(frozen=True)
class DockerSettings:
    """What `orch up` asks of the docker backend beyond the UpRequest."""

    image: str = field(default_factory=default_image)
    options: ContainerOptions = field(default_factory=ContainerOptions)
    boot_timeout: float = fleet.BOOT_TIMEOUT


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

    @staticmethod
    def _container(client: docker.DockerClient, info: RunInfo) -> Container | None:
        assert info.container is not None
        try:
            return client.containers.get(info.container.id or info.container.name)
        except docker.errors.NotFound:
            return None
        except docker.errors.APIError as exc:
            raise SandboxError(f"cannot inspect container {info.container.name}: {explain(exc)}") from exc

    # --- up ---------------------------------------------------------------------------------------
    def up(self, request: UpRequest) -> RunInfo:
        adapter, info = fleet.plan(request, Backend.DOCKER)
        del adapter  # plan validated the agent; it runs inside the container
        opts = self.settings.options
        host_workdir = Path(info.workdir)
        try:
            allow = egress.allowlist_for(os.environ, request.offline, opts.allow)
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
        self._check_image(client, self.settings.image)
        run = RunFolder.for_name(request.name)
        existing = self._find(client, container_name(request.name))
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
                self._make_volumes(client, info)
            else:
                self._make_run_folder(run, info)
                if opts.copy_workdir:
                    self._copy_workdir(host_workdir, Path(info.container.workspace_source), uid, gid)
            container = self._create(client, info, request.prompts, resume=False)
            info.container.id = str(container.id)
            if remote:
                self._upload(container, info, host_workdir)
            _save_info(run, info)
            container.start()
            self._wait_running(container, run, info)
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
        old = self._container(client, info)
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
        self._check_image(client, ci.image, ci.docker_host or DEFAULT_ENGINE)
        container = self._create(client, info, {}, resume=True)
        ci.id = str(container.id)
        info.status = RunStatus.STARTING
        _save_info(run, info)
        if not ci.remote:
            run.log_event(ControllerEvent(event="resumed", data={"container": ci.id[:12]}))
        try:
            container.start()
            self._wait_running(container, run, info)
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
            _save_info(run, info)
            return info
        return run.info()

    @staticmethod
    def _check_image(client: docker.DockerClient, image: str, address: str | None = None) -> None:
        try:
            client.images.get(image)
        except docker.errors.ImageNotFound:
            raise UsageError(
                f"image {image} is not on the Docker engine at {address or engine_address()}",
                hint="build it with `orch image build` (add --base IMAGE where no registry is reachable)",
            ) from None
        except docker.errors.APIError as exc:
            raise SandboxError(f"cannot inspect image {image}: {explain(exc)}") from exc

    @staticmethod
    def _find(client: docker.DockerClient, name: str) -> Container | None:
        try:
            return client.containers.get(name)
        except docker.errors.NotFound:
            return None

    def _remove_all(self, client: docker.DockerClient, name: str, run: RunFolder) -> None:
        """--replace: the old container, its volumes and workspace copy, and the run folder."""
        with contextlib.suppress(OrchError):
            old = run.info()
            if old.backend is Backend.LOCAL:
                fleet.server_for(old).kill()
        existing = self._find(client, container_name(name))
        if existing is not None:
            existing.remove(force=True)
        _remove_volumes(client, *run_volumes(name))
        shutil.rmtree(workspaces_dir() / name, ignore_errors=True)
        run.remove()

    @staticmethod
    def _make_run_folder(run: RunFolder, info: RunInfo) -> None:
        assert info.container is not None
        _seed(run, info)
        uid, gid = _uid_gid(info.container)
        if os.getuid() == 0 and uid != 0:
            _chown_tree(run.root, uid, gid)

    @staticmethod
    def _copy_workdir(source: Path, target: Path, uid: int, gid: int) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(target, ignore_errors=True)  # ours by construction: a leftover of a crashed run
        shutil.copytree(source, target, symlinks=True)
        if os.getuid() == 0:
            _chown_tree(target, uid, gid)

    @staticmethod
    def _make_volumes(client: docker.DockerClient, info: RunInfo) -> None:
        for volume, role in run_volumes(info.name).items():
            client.volumes.create(name=volume, labels=labels(info.name, role))

    @staticmethod
    def _upload(container: Container, info: RunInfo, host_workdir: Path) -> None:
        """Remote engine: put a fresh run folder and the workdir's copy into the (created) container's volumes."""
        assert info.container is not None
        uid, gid = _uid_gid(info.container)
        with tempfile.TemporaryDirectory(prefix="orch-upload-") as tmp:
            staged = RunFolder(Path(tmp) / info.name)
            _seed(staged, info)
            _put_tree(container, run_mount(info.name), staged.root, uid, gid)
        _put_tree(container, WORKDIR, host_workdir, uid, gid)

    def _create(self, client: docker.DockerClient, info: RunInfo, prompts: dict[int, str], resume: bool) -> Container:
        assert info.container is not None
        ci = info.container
        opts = ci.options
        uid, gid = _uid_gid(ci)
        run_mounts = _mounts(info)
        env = {
            "ORCH_HOME": "/orch",
            "ORCH_IN_CONTAINER": "1",
            "ORCH_AGENTS_DIR": AGENTS_DIR,
            "HOME": HOME,
            "USER": "worker",
            "LOGNAME": "worker",
            "SHELL": "/bin/bash",
            "TMUX_TMPDIR": "/tmp",
            "ORCH_UID": str(uid),
            "ORCH_GID": str(gid),
            "ORCH_EGRESS": opts.egress.value,
            "ORCH_EGRESS_ALLOW": ",".join(opts.allow),
        }
        if ci.remote:
            env["ORCH_CHOWN"] = f"{run_mount(info.name)}:{WORKDIR}"
        if prompts:
            env["ORCH_PROMPTS"] = json.dumps({str(n): text for n, text in prompts.items()})
        if not info.offline:
            # Credentials travel by environment only (or the read-only mount below): never a file we write.
            env.update({var: os.environ[var] for var in (*CREDENTIAL_ENV, "ANTHROPIC_BASE_URL") if os.environ.get(var)})
            creds = user_credentials_file()
            if not any(os.environ.get(v) for v in CREDENTIAL_ENV) and creds is not None and not ci.remote:
                run_mounts.append(Mount(target=CREDENTIALS_MOUNT, source=str(creds), type="bind", read_only=True))
        caps = INIT_CAPS + (FIREWALL_CAPS if opts.egress is not EgressMode.OPEN else [])
        command = [TINI, "--", "orch", "serve-run", info.name, "--boot-timeout", f"{self.settings.boot_timeout:g}"]
        if resume:
            command.append("--resume")
        try:
            return client.containers.create(
                ci.image,
                command=command,
                entrypoint=[PYTHON, "-m", "orch.containerinit", "--"],
                name=ci.name,
                hostname=ci.name[:63],
                user="0:0",  # only for the init step; it drops to ORCH_UID:ORCH_GID before the run starts
                labels=labels(info.name, ROLE_CONTAINER),
                environment=env,
                mounts=run_mounts,
                tmpfs={
                    "/tmp": f"{TMPFS_OPTS},size={TMPFS_SIZE},mode=1777",
                    HOME: f"{TMPFS_OPTS},size={TMPFS_SIZE},uid={uid},gid={gid},mode=0700",
                },
                read_only=True,
                cap_drop=["ALL"],
                cap_add=caps,
                security_opt=["no-new-privileges:true"],
                pids_limit=opts.pids,
                mem_limit=opts.memory,
                memswap_limit=opts.memory,
                nano_cpus=int(opts.cpus * 1e9),
                network=opts.network,
                working_dir=WORKDIR,
                detach=True,
            )
        except docker.errors.ImageNotFound:
            self._check_image(client, ci.image)
            raise
        except docker.errors.APIError as exc:
            raise UsageError(f"the Docker engine refused the run's container: {explain(exc)}") from exc

    def _wait_running(self, container: Container, run: RunFolder, info: RunInfo) -> None:
        """Until run.json says running (local: inotify on the mounted folder) or the container dies."""
        assert info.container is not None
        remote = info.container.remote

        def started() -> bool:
            container.reload()
            if container.status in ("exited", "dead"):
                raise SandboxError(_died_message(container, info.name))
            if remote:
                return READY_LINE in container.logs(stdout=True, stderr=False).decode(errors="replace")
            try:
                return run.info().status is RunStatus.RUNNING
            except OrchError:
                return False

        timeout = self.settings.boot_timeout + START_MARGIN
        try:
            wait_until(
                started,
                timeout,
                "the run's container to start its workers",
                interval=0.5,
                watch=None if remote else run.root,
            )
        except WaitTimeoutError:
            raise WaitTimeoutError(
                f"run {info.name}: workers not running within {timeout:g}s; container log: {_log_tail(container)}",
                hint="raise --boot-timeout, or look at the transcripts in the run folder's logs/",
            ) from None

    def _cleanup_failed_up(
        self, client: docker.DockerClient, container: Container | None, run: RunFolder, info: RunInfo
    ) -> None:
        """Nothing half-created: the container, volumes, workspace copy and run folder go."""
        with contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException):
            if container is not None:
                container.remove(force=True)
            else:
                found = self._find(client, container_name(info.name))
                if found is not None and found.labels.get(LABEL_RUN) == info.name:
                    found.remove(force=True)
        with contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException):
            if info.container is not None and info.container.remote:
                _remove_volumes(client, *run_volumes(info.name))
        if info.container is not None and info.container.options.copy_workdir and not info.container.remote:
            shutil.rmtree(info.container.workspace_source, ignore_errors=True)
        run.remove()

    # --- commands inside the container ------------------------------------------------------------
    def _running(self, info: RunInfo) -> tuple[docker.DockerClient, Container]:
        client = self.client(info)
        container = self._container(client, info)
        if container is None or container.status != "running":
            why = describe(container)
            raise DeliveryError(f"run {info.name!r}: its container is {why}", hint=f"orch up {info.name} --resume")
        return client, container

    def _exec(self, info: RunInfo, argv: list[str], stdin: str | None = None) -> _Exec:
        """A `docker exec` of argv in the run's running container, as the run's user."""
        assert info.container is not None
        client, container = self._running(info)
        return _Exec(client, container, info.container.user, argv, stdin)

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
        container = self._container(self.client(info), info)
        return container is not None and container.status == "running"

    def state(self, info: RunInfo) -> str:
        """The container's state for `orch ls` / `orch status`: running, exited (137), removed."""
        return describe(self._container(self.client(info), info))

    # --- teardown ---------------------------------------------------------------------------------
    def kill(self, info: RunInfo) -> None:
        """Stop (SIGTERM: the controller stops tmux and marks the run stopped) and remove the container.

        The run folder stays; on a remote engine it is pulled back first. A `--copy` workspace goes.
        """
        assert info.container is not None
        ci = info.container
        client = self.client(info)
        container = self._container(client, info)
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
                _remove_volumes(client, workspace_volume_name(info.name))
            else:
                shutil.rmtree(ci.workspace_source, ignore_errors=True)
        current = run.info()
        current.status = RunStatus.STOPPED
        _save_info(run, current)
        run.log_event(ControllerEvent(event="container-removed", data={"container": ci.id[:12]}))

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
            container.remove(force=True)
            removed.append(f"container {container.name} (run {name}, {container.status})")
            if ours and info is not None and not stopped:
                run = RunFolder.for_name(name)
                info.status = RunStatus.STOPPED
                _save_info(run, info)
                run.log_event(ControllerEvent(event="reaped", data={"container": container.short_id}))
        in_use = {m.get("Name") for c in client.containers.list(all=True) for m in c.attrs.get("Mounts", [])}
        for volume in client.volumes.list(filters=filters):
            name = (volume.attrs.get("Labels") or {}).get(LABEL_RUN, "")
            info = _known_run(name)
            if volume.name in in_use or info is None or info.status is not RunStatus.STOPPED:
                continue
            pulled = info.container is not None and info.container.last_pull is not None
            if (volume.attrs.get("Labels") or {}).get(LABEL_ROLE) == ROLE_RUN_FOLDER and not pulled:
                continue
            volume.remove(force=True)
            removed.append(f"volume {volume.name} (run {name})")
        if workspaces_dir().is_dir():
            for copy in workspaces_dir().iterdir():
                info = _known_run(copy.name)
                if info is None or info.status is RunStatus.STOPPED:
                    shutil.rmtree(copy, ignore_errors=True)
                    removed.append(f"workspace copy {copy}")
        return removed

    def pull(self, info: RunInfo) -> RunInfo:
        """Copy a remote run's folder back into the local one (files only ever added or updated)."""
        assert info.container is not None
        ci = info.container
        run = RunFolder.for_name(info.name)
        if not ci.remote:
            return info
        client = self.client(info)
        source = self._container(client, info)
        helper = None
        if source is None:
            helper = client.containers.create(
                ci.image,
                command=["true"],
                entrypoint=[],
                labels=labels(info.name, ROLE_HELPER),
                mounts=[_mount(info, run_mount(info.name), ci.host_run_dir)],
                network_disabled=True,
            )
            source = helper
        try:
            stream, _ = source.get_archive(run_mount(info.name))
            with tempfile.TemporaryFile() as buf:
                for chunk in stream:
                    buf.write(chunk)
                buf.seek(0)
                pulled = _extract_run(buf, info.name, run)
        except docker.errors.APIError as exc:
            raise SandboxError(f"cannot copy run {info.name} back from {ci.docker_host}: {explain(exc)}") from exc
        finally:
            if helper is not None:
                with contextlib.suppress(docker.errors.DockerException):
                    helper.remove(force=True)
        local = _merge_info(pulled, info)
        _save_info(run, local)
        return local


class _Exec:
    """One `docker exec` as the run's user: stdin sent then closed, output as (stream, bytes) frames."""

    def __init__(
        self, client: docker.DockerClient, container: Container, user: str, argv: list[str], stdin: str | None
    ) -> None:
        self.api = client.api
        self.stdin = stdin
        self.exec_id = self.api.exec_create(
            container.id, argv, stdin=stdin is not None, stdout=True, stderr=True, user=user
        )["Id"]

    def frames(self) -> Iterator[tuple[int, bytes]]:
        sock = self.api.exec_start(self.exec_id, socket=True)
        try:
            if self.stdin is not None:
                _send_and_half_close(sock, self.stdin.encode())
            frames: Iterator[tuple[int, bytes]] = frames_iter(sock, tty=False)  # type: ignore[no-untyped-call]
            yield from frames
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    def exit_code(self) -> int:
        code = self.api.exec_inspect(self.exec_id).get("ExitCode")
        return int(code) if code is not None else 1


# --- helpers ---------------------------------------------------------------------------------------
def describe(container: Container | None) -> str:
    """A container's state in a few words (the container as just fetched: no reload)."""
    if container is None:
        return "removed"
    if container.status == "running":
        return "running"
    code = container.attrs.get("State", {}).get("ExitCode")
    return f"{container.status} ({code})" if code is not None else str(container.status)


def exec_argv(info: RunInfo, argv: list[str]) -> NoReturn:
    """Replace this process with an interactive `docker exec -it` (the CLI owns the terminal best)."""
    assert info.container is not None
    docker_cli = shutil.which("docker")
    if docker_cli is None:
        raise UsageError("`orch attach` to a container run needs the docker CLI", hint="apt-get install docker.io")
    host = ["-H", info.container.docker_host] if info.container.docker_host else []
    cmd = [docker_cli, *host, "exec", "-it", "-u", info.container.user, info.container.name, *argv]
    os.execvp(cmd[0], cmd)


def _log_tail(container: Container, lines: int = 5) -> str:
    try:
        text = container.logs(stdout=True, stderr=True, tail=lines).decode(errors="replace")
    except docker.errors.DockerException:
        return "(no log)"
    return " | ".join(line.strip() for line in text.splitlines() if line.strip()) or "(empty)"


def _died_message(container: Container, name: str) -> str:
    code = container.attrs.get("State", {}).get("ExitCode")
    return f"run {name}: the container exited (code {code}) while starting: {_log_tail(container)}"


def _send_and_half_close(sock: Any, data: bytes) -> None:
    """Write stdin for an exec, then signal EOF while still reading its output."""
    raw = getattr(sock, "_sock", sock)
    raw.sendall(data)
    proc = getattr(raw, "proc", None)
    if proc is not None:  # docker's ssh transport: EOF is the ssh process's stdin closing (dial-stdio)
        proc.stdin.close()
    else:
        raw.shutdown(socket.SHUT_WR)


def _mounts(info: RunInfo) -> list[Mount]:
    """The run folder and the workspace, as the run's container mounts them."""
    assert info.container is not None
    return [
        _mount(info, run_mount(info.name), info.container.host_run_dir),
        _mount(info, WORKDIR, info.container.workspace_source),
    ]


def _mount(info: RunInfo, target: str, source: str) -> Mount:
    assert info.container is not None
    kind: Literal["volume", "bind"] = "volume" if info.container.remote else "bind"
    return Mount(target=target, source=source, type=kind, read_only=False)


def _remove_volumes(client: docker.DockerClient, *volumes: str) -> None:
    """Remove these volumes where they exist."""
    for volume in volumes:
        with contextlib.suppress(docker.errors.NotFound):
            client.volumes.get(volume).remove(force=True)


def _seed(run: RunFolder, info: RunInfo) -> None:
    """A new run folder. Files the container appends to must exist before the host (maybe root) ever touches them."""
    run.create(info)
    run.events.touch()
    run.bus_lock.touch()
    run.sessions_dir.mkdir()


def _put_tree(container: Container, target: str, source: Path, uid: int, gid: int) -> None:
    """put_archive `source`'s contents into `target`, owned by uid:gid."""

    def owned(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        ti.uid, ti.gid, ti.uname, ti.gname = uid, gid, "", ""
        return ti

    with tempfile.TemporaryFile() as buf:
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for item in sorted(source.iterdir()):
                tar.add(item, arcname=item.name, filter=owned)
        buf.seek(0)
        if not container.put_archive(target, buf):
            raise SandboxError(f"could not copy {source} into the container at {target}")


def _extract_run(buf: BinaryIO, name: str, run: RunFolder) -> RunInfo:
    """Unpack a run folder archive (top folder `name/`) over the local run folder; return its run.json."""
    with tempfile.TemporaryDirectory(prefix="orch-pull-") as tmp, tarfile.open(fileobj=buf) as tar:
        tar.extractall(tmp, filter="data")
        pulled = Path(tmp) / name
        if not (pulled / "run.json").is_file():
            raise SandboxError(f"the archive of run {name} has no run.json")
        remote_info = RunFolder(pulled).info()
        run.root.mkdir(parents=True, exist_ok=True)
        for src in pulled.rglob("*"):
            dest = run.root / src.relative_to(pulled)
            if src.is_dir():
                dest.mkdir(parents=True, exist_ok=True)
            elif src.name != "run.json" or src.parent != pulled:
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest)
    return remote_info


def _merge_info(remote: RunInfo, local: RunInfo) -> RunInfo:
    """The local stub's run.json after a pull: the remote's view, with this machine's container record."""
    merged = remote.model_copy(deep=True)
    assert local.container is not None
    merged.container = local.container.model_copy(update={"last_pull": dt.datetime.now(dt.UTC)})
    if local.status is RunStatus.STOPPED:
        merged.status = RunStatus.STOPPED
    return merged


def _save_info(run: RunFolder, info: RunInfo) -> None:
    """Write run.json; for a run whose folder lives on a remote engine, this local copy is all there is."""
    run.root.mkdir(parents=True, exist_ok=True)
    run.write_info(info)


def _known_run(name: str) -> RunInfo | None:
    try:
        return RunFolder.for_name(name).info()
    except OrchError:
        return None

"""The two things mounted into a run's container, its run folder and its workspace.

On a local engine they are bind mounts of this machine's run folder and of the workdir (or its `--copy`);
on a remote engine they are labelled volumes there: filled through the created container, and the run
folder pulled back into the local one (`orch pull`, `orch kill`), whose run.json is then all there is here.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import BinaryIO, Literal

import docker
import docker.errors
from docker.models.containers import Container
from docker.types import Mount

from orch.backends.docker.engine import explain
from orch.container.layout import ROLE_HELPER, WORKDIR, labels, run_mount, run_volumes, uid_gid
from orch.errors import SandboxError
from orch.run.files import atomic_write, merged_log
from orch.run.folder import RunFolder
from orch.run.records import DockerRunInfo, Isolation, RunInfo, RunStatus


def mounts(info: DockerRunInfo) -> list[Mount]:
    """The run folder and the workspace, as the run's container mounts them."""
    # Under strict isolation the tree is evidence: no worker (nor the controller) may change it.
    evidence = info.isolation is Isolation.STRICT
    return [
        _mount(info, run_mount(info.name), info.container.host_run_dir),
        _mount(info, WORKDIR, info.container.workspace_source, read_only=evidence),
    ]


def _mount(info: DockerRunInfo, target: str, source: str, read_only: bool = False) -> Mount:
    kind: Literal["volume", "bind"] = "volume" if info.container.on_remote_engine else "bind"
    return Mount(target=target, source=source, type=kind, read_only=read_only)


# --- on this machine (local engine) ----------------------------------------------------------------
def make_run_folder(run: RunFolder, info: DockerRunInfo, recording: Path | None = None) -> None:
    """A new run folder on this machine, with the exported `recording` the run replays (if any)."""
    seed_folder(run, info, recording)
    uid, gid = uid_gid(info.container)
    if os.getuid() == 0 and uid != 0:
        _chown_tree(run.root, uid, gid)


def copy_workdir(source: Path, target: Path, uid: int, gid: int) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(target, ignore_errors=True)  # ours by construction: a leftover of a crashed run
    shutil.copytree(source, target, symlinks=True)
    if os.getuid() == 0:
        _chown_tree(target, uid, gid)


def save_info(run: RunFolder, info: RunInfo) -> None:
    """Write run.json; for a run whose folder lives on a remote engine, this local copy is all there is."""
    run.root.mkdir(parents=True, exist_ok=True)
    run.write_info(info)


def reclaim_run_folder(client: docker.DockerClient, info: DockerRunInfo, image: str | None = None) -> None:
    """Hand the run folder back to the run's uid (the host user), so it stays removable.

    In the container other uids own parts of it: the gateway's `model/`, which the workers must not write,
    and under strict isolation each worker's outbox, hook log and sessions. Once the container has stopped
    a short-lived helper (root with CHOWN only, no network, only that folder mounted) gives them back.
    Only needed on a local engine when this process is not root (root removes anything) and something in
    the folder is another uid's.
    """
    if info.container.on_remote_engine:
        return
    root = Path(info.container.host_run_dir)
    uid, gid = uid_gid(info.container)
    if os.getuid() == 0 or not _foreign(root, uid):
        return
    chown_in_helper(client, image or info.container.image, info.name, root, uid, gid)


def _foreign(root: Path, uid: int) -> bool:
    try:
        return any(p.lstat().st_uid != uid for p in [root, *root.rglob("*")])
    except OSError:
        return root.exists()


def chown_in_helper(client: docker.DockerClient, image: str, name: str, folder: Path, uid: int, gid: int) -> None:
    try:
        client.containers.run(
            image,
            ["chown", "-R", "-h", f"{uid}:{gid}", "/folder"],
            entrypoint=[],
            user="0:0",
            cap_drop=["ALL"],
            cap_add=["CHOWN"],
            security_opt=["no-new-privileges:true"],
            network_disabled=True,
            read_only=True,
            labels=labels(name, ROLE_HELPER),
            mounts=[Mount(target="/folder", source=str(folder), type="bind")],
            remove=True,
        )
    except docker.errors.DockerException as exc:
        raise SandboxError(f"cannot hand {folder} back to uid {uid}: {exc}") from exc


# --- on a remote engine ----------------------------------------------------------------------------
def make_volumes(client: docker.DockerClient, info: DockerRunInfo) -> None:
    for volume, role in run_volumes(info.name).items():
        client.volumes.create(name=volume, labels=labels(info.name, role))


def remove_volumes(client: docker.DockerClient, *volumes: str) -> None:
    """Remove these volumes where they exist."""
    for volume in volumes:
        with contextlib.suppress(docker.errors.NotFound):
            client.volumes.get(volume).remove(force=True)


def upload(container: Container, info: DockerRunInfo, host_workdir: Path, recording: Path | None = None) -> None:
    """Put a fresh run folder (with the exported `recording` the run replays) and the workdir's copy into
    the (created) container's volumes."""
    uid, gid = uid_gid(info.container)
    with tempfile.TemporaryDirectory(prefix="orch-upload-") as tmp:
        staged = RunFolder(Path(tmp) / info.name)
        seed_folder(staged, info, recording)
        put_tree(container, run_mount(info.name), staged.root, uid, gid)
    if info.isolation is Isolation.STRICT:  # the run's container mounts the workspace read-only
        _upload_workspace(container, info, host_workdir, uid, gid)
    else:
        put_tree(container, WORKDIR, host_workdir, uid, gid)


def _upload_workspace(container: Container, info: DockerRunInfo, host_workdir: Path, uid: int, gid: int) -> None:
    """The workdir's copy into the workspace volume through a helper (created, never started) that mounts
    it writable."""
    assert info.container.on_remote_engine
    helper = container.client.containers.create(  # type: ignore[union-attr]
        info.container.image,
        ["true"],
        entrypoint=[],
        user="0:0",
        network_disabled=True,
        labels=labels(info.name, ROLE_HELPER),
        mounts=[Mount(target=WORKDIR, source=info.container.workspace_source, type="volume")],
    )
    try:
        put_tree(helper, WORKDIR, host_workdir, uid, gid)
    finally:
        helper.remove(force=True)


def push(container: Container, info: DockerRunInfo, files: list[Path]) -> None:
    """Copy these files of the local run folder (its top level) into the remote one, replacing them there."""
    uid, gid = uid_gid(info.container)
    put_paths(container, run_mount(info.name), files, uid, gid)


def pull(client: docker.DockerClient, info: DockerRunInfo, source: Container | None) -> DockerRunInfo:
    """Copy a remote run's folder back into the local one (files only ever added or updated).

    Read through `source`, the run's container, or when that is gone through a helper container.
    """
    ci = info.container
    run = RunFolder.for_name(info.name)
    helper = None
    try:  # creating the helper fails too when the engine lost the image: same one-line error
        if source is None:
            helper = source = client.containers.create(
                ci.image,
                command=["true"],
                entrypoint=[],
                labels=labels(info.name, ROLE_HELPER),
                mounts=[_mount(info, run_mount(info.name), ci.host_run_dir)],
                network_disabled=True,
            )
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
    save_info(run, local)
    return local


# --- helpers ---------------------------------------------------------------------------------------
def seed_folder(run: RunFolder, info: DockerRunInfo, recording: Path | None) -> None:
    """A new run folder. Files the container appends to must exist before the host (maybe root) ever touches them.

    `recording` (a replay of an exported file): copied into the gateway's `model/`, read-only; the
    container's init gives `model/` and all in it to the gateway's uid before any worker starts
    (orch.container.owners.own_model_dir), so no worker can alter, replace or remove what its run replays."""
    run.create(info)
    run.events.touch()
    run.bus_lock.touch()
    run.sessions_dir.mkdir()
    if recording is not None:
        run.model_dir.mkdir(exist_ok=True)
        shutil.copyfile(recording, run.replay_recording, follow_symlinks=True)
        os.chmod(run.replay_recording, 0o444)


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    os.chown(root, uid, gid, follow_symlinks=False)
    for dirpath, dirnames, filenames in os.walk(root):
        for item in (*dirnames, *filenames):
            os.chown(os.path.join(dirpath, item), uid, gid, follow_symlinks=False)


def put_tree(container: Container, target: str, source: Path, uid: int, gid: int) -> None:
    """put_archive `source`'s contents into `target`, owned by uid:gid."""
    put_paths(container, target, sorted(source.iterdir()), uid, gid)


def put_paths(container: Container, target: str, items: list[Path], uid: int, gid: int) -> None:
    """put_archive these files and folders (by their names) into `target`, owned by uid:gid."""

    def owned(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        ti.uid, ti.gid, ti.uname, ti.gname = uid, gid, "", ""
        return ti

    with tempfile.TemporaryFile() as buf:
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for item in items:
                tar.add(item, arcname=item.name, filter=owned)
        buf.seek(0)
        if not container.put_archive(target, buf):
            where = items[0].parent if items else "nothing"
            raise SandboxError(f"could not copy {where} into the container at {target}")


def _extract_run(buf: BinaryIO, name: str, run: RunFolder) -> RunInfo:
    """Unpack a run folder archive (top folder `name/`) over the local run folder; return its run.json."""
    with tempfile.TemporaryDirectory(prefix="orch-pull-") as tmp, tarfile.open(fileobj=buf) as tar:
        tar.extractall(tmp, filter="data")
        pulled = RunFolder(Path(tmp) / name)
        if not pulled.exists():
            raise SandboxError(f"the archive of run {name} has no {pulled.run_json.name}")
        remote_info = pulled.info()
        run.root.mkdir(parents=True, exist_ok=True)
        for src in pulled.root.rglob("*"):
            dest = run.root / src.relative_to(pulled.root)
            if src.is_dir():
                dest.mkdir(parents=True, exist_ok=True)
            elif src == pulled.events and dest.is_file():  # this side's own lines stay (orch run's first)
                atomic_write(dest, merged_log(dest.read_bytes(), src.read_bytes()))
            elif src != pulled.run_json:
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest)
    return remote_info


def _merge_info(remote: RunInfo, local: DockerRunInfo) -> DockerRunInfo:
    """The local stub's run.json after a pull: the remote's view, with this machine's container record."""
    merged = DockerRunInfo.of(
        remote, container=local.container.model_copy(update={"last_pull": dt.datetime.now(dt.UTC)})
    )
    if local.status is RunStatus.STOPPED:
        merged.status = RunStatus.STOPPED
    return merged

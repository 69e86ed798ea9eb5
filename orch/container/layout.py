"""What a containerised run is made of on a Docker engine: the names and labels of what orch creates
there, the paths inside the run's container, and the uid:gid the run's processes have.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from orch.run.records import ContainerInfo

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
ROOT_HOST_UID = 1000


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


def uid_gid(info: ContainerInfo) -> tuple[int, int]:
    """The run's uid:gid, from its container record."""
    uid, _, gid = info.user.partition(":")
    return int(uid), int(gid or uid)

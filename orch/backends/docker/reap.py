"""`orch reap`: remove what crashed or stopped runs left on a Docker engine, found by orch's labels."""

from __future__ import annotations

import contextlib
import shutil

import docker
import docker.errors

from orch.backends.docker.mounts import save_info
from orch.container.layout import LABEL_MANAGED, LABEL_ROLE, LABEL_RUN, ROLE_RUN_FOLDER
from orch.errors import OrchError
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.paths import workspaces_dir
from orch.run.records import ControllerEvent, DockerRunInfo, RunInfo, RunStatus


def reap(client: docker.DockerClient) -> list[str]:
    """Remove what crashed or stopped runs left on the engine (by label); return what was removed.

    A container goes when it is not running, or its run is stopped or unknown-and-dead, or it is not
    the container its run.json names. A running container of a run this machine does not know is
    left alone (another machine may own it). A run's volumes go once its run is stopped (and, for
    the run folder, pulled since); `--copy` workspaces of stopped or vanished runs go too.
    """
    removed: list[str] = []
    filters: dict[str, str | list[str] | bool] = {"label": f"{LABEL_MANAGED}=true"}
    for container in client.containers.list(all=True, filters=filters, ignore_removed=True):
        name = container.labels.get(LABEL_RUN, "")
        info = _known_run(name)
        running = container.status == "running"
        ours = isinstance(info, DockerRunInfo) and info.container.id == container.id
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
    in_use = {
        m.get("Name") for c in client.containers.list(all=True, ignore_removed=True) for m in c.attrs.get("Mounts", [])
    }
    for volume in client.volumes.list(filters=filters):
        name = (volume.attrs.get("Labels") or {}).get(LABEL_RUN, "")
        info = _known_run(name)
        if volume.name in in_use or info is None or info.status is not RunStatus.STOPPED:
            continue
        pulled = isinstance(info, DockerRunInfo) and info.container.last_pull is not None
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


def _known_run(name: str) -> RunInfo | None:
    try:
        return RunFolder.for_name(name).info()
    except OrchError:
        return None

"""Removing what a run made on an engine, from outside its container: `orch up --replace`'s old run, and
everything an `up` that failed had made (nothing half-created stays). orch.backends.docker.reap does the same for
runs that crashed."""

from __future__ import annotations

import contextlib
import shutil

import docker
import docker.errors
import requests.exceptions
from docker.models.containers import Container

from orch.backends import registry
from orch.backends.docker import mounts
from orch.backends.docker.boot import find
from orch.container.layout import LABEL_RUN, container_name, run_volumes
from orch.errors import OrchError
from orch.run.folder import RunFolder
from orch.run.paths import workspaces_dir
from orch.run.records import DockerRunInfo


def replace_run(client: docker.DockerClient, name: str, run: RunFolder) -> None:
    """--replace: the old container, its volumes and workspace copy, and the run folder."""
    with contextlib.suppress(OrchError):
        old = run.info()
        if not isinstance(old, DockerRunInfo):  # another backend's run of the name: its backend stops it
            registry.sandbox_for(old).kill(old)
    existing = find(client, container_name(name))
    if existing is not None:
        existing.remove(force=True)
    mounts.remove_volumes(client, *run_volumes(name))
    shutil.rmtree(workspaces_dir() / name, ignore_errors=True)
    with contextlib.suppress(OrchError):
        old_info = run.info()
        if isinstance(old_info, DockerRunInfo):
            mounts.reclaim_run_folder(client, old_info)
    run.remove()


def failed_up(client: docker.DockerClient, container: Container | None, run: RunFolder, info: DockerRunInfo) -> None:
    """Nothing half-created: the container, volumes, workspace copy and run folder go."""
    with contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException):
        if container is not None:
            container.remove(force=True)
        else:
            found = find(client, container_name(info.name))
            if found is not None and found.labels.get(LABEL_RUN) == info.name:
                found.remove(force=True)
    with contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException):
        if info.container.on_remote_engine:
            mounts.remove_volumes(client, *run_volumes(info.name))
    if info.container.options.copy_workdir and not info.container.on_remote_engine:
        shutil.rmtree(info.container.workspace_source, ignore_errors=True)
    with contextlib.suppress(OrchError, docker.errors.DockerException, requests.exceptions.RequestException):
        mounts.reclaim_run_folder(client, info)
    run.remove()

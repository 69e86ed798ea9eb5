"""A swarm run's objects on its cluster, made and removed through the manager alone: its overlay network, the
secrets of each life, its collector, the service of each life; and what became of that service's task.

Everything is found by its labels (orch.backends.swarm.names), so nothing of a run is left when it ends, on
any node: removing a service removes its task's container and anonymous volumes on the node that ran it.
"""

from __future__ import annotations

import contextlib
import secrets
from dataclasses import dataclass
from typing import Any

import docker
import docker.errors
import requests.exceptions
from docker.models.containers import Container

from orch.backends.docker.boot import env_uid_base
from orch.backends.docker.boot import taken_uid_bases as taken_uid_bases_here
from orch.backends.docker.engine import explain
from orch.backends.swarm import spec
from orch.backends.swarm.collector import READY_LINE
from orch.backends.swarm.names import (
    ROLE_NETWORK,
    ROLE_RUN,
    ROLE_SECRET,
    collector_name,
    network_name,
    secret_name,
    swarm_labels,
)
from orch.backends.swarm.record import SwarmInfo
from orch.container.layout import LABEL_MANAGED, LABEL_ROLE, LABEL_RUN
from orch.errors import SandboxError, UsageError, WaitTimeoutError
from orch.run.records import EgressMode, RunInfoBase
from orch.settings.user import WORKER_UID_BASE
from orch.waits import wait_until

DockerErrors = (docker.errors.DockerException, requests.exceptions.RequestException)
GONE_TIMEOUT = 60.0
"""Seconds a removed service's task gets to go from its node before the network it used is removed."""
RUNNING_TIMEOUT = 120.0
"""Seconds the collector gets to start on the manager (its image is there: orch checked)."""
PLACE_TIMEOUT = 10.0
"""Seconds Swarm gets to give a new task its node while other runs wait to be placed."""
TASK_DONE = ("complete", "failed", "shutdown", "rejected", "orphaned", "remove")
NODE_GONE = ("down", "disconnected", "unknown")


def swarm_api(client: docker.DockerClient) -> Any:
    """docker-py's low-level client, for its swarm calls: their version decorator drops their types."""
    return client.api


def manager_node(client: docker.DockerClient, address: str) -> str:
    """The node id of the engine `client` talks to, which must be a swarm manager."""
    info = client.info().get("Swarm") or {}
    if info.get("LocalNodeState") != "active" or not info.get("ControlAvailable"):
        raise UsageError(
            f"the Docker engine at {address} is not a swarm manager",
            hint="point DOCKER_HOST at a manager of the swarm (`docker node ls` works there), "
            "or make one: docker swarm init",
        )
    return str(info["NodeID"])


def make_network(client: docker.DockerClient, name: str, egress: EgressMode) -> str:
    """The run's own overlay network: its task and its collector, nothing else. With `--egress none` it is
    internal (no way out at all); otherwise the node's gateway bridge gives a way out, which the task's own
    firewall holds to the allowlist."""
    labels = swarm_labels(name, ROLE_NETWORK)
    net = swarm_api(client).create_network(
        network_name(name), driver="overlay", internal=egress is EgressMode.NONE, attachable=False, labels=labels
    )
    return str(net["Id"])


def check_network(client: docker.DockerClient, network: str) -> None:
    """`--network NAME`, asked of the manager before anything is made: a swarm-scoped network of that name
    (an overlay) that a service can join."""
    hint = f"docker network create --driver overlay {network} (on a manager), then --network {network}"
    try:
        found = swarm_api(client).inspect_network(network, scope="swarm")
    except docker.errors.NotFound:
        raise UsageError(f"--network {network}: no swarm network of that name on the manager", hint=hint) from None
    except docker.errors.APIError as exc:
        raise UsageError(f"--network {network}: the manager says {explain(exc)}", hint=hint) from None
    if found.get("Scope") != "swarm":
        kind = found.get("Driver") or "?"
        raise UsageError(f"--network {network}: a {kind} network of one node, not a swarm network", hint=hint)


def make_secret(client: docker.DockerClient, name: str, what: str, life: int, data: bytes) -> str:
    """A secret of this life of the run; only the tasks that name it get it, on a tmpfs."""
    created = swarm_api(client).create_secret(
        secret_name(name, what, life), data, labels=swarm_labels(name, ROLE_SECRET, life)
    )
    return str(created["ID"])


def secret_id(client: docker.DockerClient, name: str, what: str, life: int) -> str:
    found = swarm_api(client).secrets(filters={"name": secret_name(name, what, life)})
    if not found:
        raise SandboxError(f"run {name}: its secret {secret_name(name, what, life)} is gone", hint=f"orch kill {name}")
    return str(found[0]["ID"])


def network_id(client: docker.DockerClient, name: str) -> str:
    try:
        return str(swarm_api(client).inspect_network(network_name(name))["Id"])
    except docker.errors.NotFound:
        raise SandboxError(f"run {name}: its network {network_name(name)} is gone", hint=f"orch kill {name}") from None


def exists(client: docker.DockerClient, name: str) -> bool:
    """Whether anything of run `name` is on the cluster (a service of it, or its network)."""
    filters = {"label": f"{LABEL_RUN}={name}"}
    return bool(swarm_api(client).services(filters=filters) or swarm_api(client).networks(filters=filters))


def new_token() -> bytes:
    return secrets.token_urlsafe(32).encode()


def create_service(client: docker.DockerClient, spec_args: dict[str, Any]) -> str:
    try:
        return str(swarm_api(client).create_service(**spec_args)["ID"])
    except docker.errors.APIError as exc:
        raise SandboxError(f"the swarm manager refused the service {spec_args['name']}: {explain(exc)}") from exc


def update_collector(client: docker.DockerClient, info: RunInfoBase, swarm: SwarmInfo, life: int, sync: str) -> None:
    """The collector of a new life: its new token, passes from that life alone (Swarm restarts its task; its
    volume stays)."""
    service = swarm_api(client).inspect_service(collector_name(info.name))
    network = service["Spec"]["TaskTemplate"]["Networks"][0]["Target"]
    args = spec.collector_service(info, swarm, life, sync, network)
    swarm_api(client).update_service(service["ID"], service["Version"]["Index"], **args)


def collector_container(
    client: docker.DockerClient, name: str, life: int | None = None, timeout: float = RUNNING_TIMEOUT
) -> Container:
    """The collector's running container, on this manager (as the spec places it); with `life`, once it
    takes that life's passes."""
    filters: dict[str, Any] = {"label": f"com.docker.swarm.service.name={collector_name(name)}", "status": "running"}
    ready = READY_LINE if life is None else f"{READY_LINE}: life {life} "

    def running() -> Container | None:
        for found in client.containers.list(filters=filters, ignore_removed=True):
            if ready in found.logs(stdout=True, stderr=False).decode(errors="replace"):
                return found
        return None

    try:
        return wait_until(running, timeout, f"the collector of run {name} to run on the manager", interval=0.3)
    except WaitTimeoutError:
        why = task_error(client, collector_name(name))
        raise SandboxError(
            f"run {name}: its collector did not start on the manager{f': {why}' if why else ''}"
        ) from None


@dataclass(frozen=True)
class TaskView:
    """A service's task as the manager sees it."""

    state: str
    desired: str
    node_id: str
    error: str
    exit_code: int | None


def task_of(client: docker.DockerClient, service: str) -> TaskView | None:
    """The service's newest task (None: none yet, or the service is gone)."""
    try:
        tasks = swarm_api(client).tasks(filters={"service": service})
    except docker.errors.NotFound:  # the service is gone, and its tasks with it
        return None
    if not tasks:
        return None
    task = max(tasks, key=lambda t: t.get("UpdatedAt", ""))
    status = task.get("Status") or {}
    exit_code = (status.get("ContainerStatus") or {}).get("ExitCode")
    return TaskView(
        str(status.get("State", "")),
        str(task.get("DesiredState", "")),
        str(task.get("NodeID", "")),
        str(status.get("Err") or status.get("Message") or ""),
        int(exit_code) if exit_code is not None else None,
    )


def placed(client: docker.DockerClient, service: str, timeout: float = PLACE_TIMEOUT) -> str:
    """The hostname of the node Swarm placed the service's task on ("" when none fits yet: the task waits,
    and `lost` or the wait for its workers says why)."""

    def node() -> str | None:
        task = task_of(client, service)
        return task.node_id if task is not None and task.node_id else None

    try:
        return node_name(client, wait_until(node, timeout, "Swarm to place the run's task", interval=0.2))
    except WaitTimeoutError:
        return ""


def task_of_any(client: docker.DockerClient, services: list[str]) -> TaskView | None:
    """A task still left of any of these services (None: all gone)."""
    for sid in services:
        task = task_of(client, sid)
        if task is not None:
            return task
    return None


def task_error(client: docker.DockerClient, service: str) -> str:
    task = task_of(client, service)
    return task.error if task is not None and task.state in TASK_DONE else ""


def node_name(client: docker.DockerClient, node_id: str) -> str:
    with contextlib.suppress(*DockerErrors):
        return str(swarm_api(client).inspect_node(node_id)["Description"]["Hostname"])
    return node_id[:12]


def lost(client: docker.DockerClient, service: str) -> str | None:
    """Why the service's task no longer runs the run, in a few words, with its node's name (None: it runs,
    or is still on its way)."""
    task = task_of(client, service)
    if task is None:
        return "its service is gone"
    where = node_name(client, task.node_id) if task.node_id else ""
    if task.node_id:
        with contextlib.suppress(*DockerErrors):
            node = swarm_api(client).inspect_node(task.node_id)
            state = (node.get("Status") or {}).get("State", "")
            if state in NODE_GONE:
                message = (node.get("Status") or {}).get("Message") or state
                return f"node {where} is {state}: {message}"
    if task.state == "rejected":
        load = "; load the image there (docker save IMAGE | docker load)" if "No such image" in task.error else ""
        return f"node {where} rejected the task: {task.error}{load}"
    if task.state == "failed":
        code = f" (exit {task.exit_code})" if task.exit_code is not None else ""
        return f"its task failed on node {where}{code}: {task.error}"
    if task.state in ("orphaned", "shutdown", "remove") and task.desired not in ("running", "ready"):
        return f"its task on node {where} was {task.state}"
    return None


def full_nodes(client: docker.DockerClient, per_node: int | None) -> list[str]:
    """Constraints that keep a new run off the nodes already running `per_node` orch runs."""
    if per_node is None:
        return []
    count: dict[str, int] = {}
    for service in swarm_api(client).services(filters={"label": [f"{LABEL_ROLE}={ROLE_RUN}", f"{LABEL_MANAGED}=true"]}):
        for task in swarm_api(client).tasks(filters={"service": service["ID"], "desired-state": "running"}):
            if task.get("NodeID"):
                count[task["NodeID"]] = count.get(task["NodeID"], 0) + 1
    return [f"node.id!={node}" for node, runs in sorted(count.items()) if runs >= per_node]


def taken_uid_bases(client: docker.DockerClient) -> set[int]:
    """The worker uid bases of the cluster's orch runs (their services', on whichever node) and of the orch
    containers on the manager's own engine (orch.backends.docker.boot.taken_uid_bases)."""
    found = taken_uid_bases_here(client)
    for service in swarm_api(client).services(filters={"label": [f"{LABEL_ROLE}={ROLE_RUN}", f"{LABEL_MANAGED}=true"]}):
        base = env_uid_base(service.get("Spec", {}).get("TaskTemplate", {}).get("ContainerSpec", {}).get("Env"))
        found.add(WORKER_UID_BASE.get() if base is None else base)
    return found


def ready_nodes(client: docker.DockerClient) -> list[dict[str, Any]]:
    return [
        n
        for n in swarm_api(client).nodes()
        if (n.get("Status") or {}).get("State") == "ready" and (n.get("Spec") or {}).get("Availability") == "active"
    ]


def remove_service(client: docker.DockerClient, service: str) -> None:
    with contextlib.suppress(docker.errors.NotFound):
        swarm_api(client).remove_service(service)


def remove_run(client: docker.DockerClient, name: str, timeout: float = GONE_TIMEOUT) -> list[str]:
    """Everything of run `name` on the cluster: its services (so their tasks' containers and volumes go on
    every node), then, once no task of them is left, its network, its secrets and the collector's volume on
    the manager. What could not go, in a few words each (nothing: all of it went)."""
    filters = {"label": f"{LABEL_RUN}={name}"}
    left: list[str] = []
    services = [s for s in swarm_api(client).services(filters=filters) if _ours(s.get("Spec", {}).get("Labels"))]
    for service in services:
        remove_service(client, service["ID"])

    def tasks_gone() -> bool:
        return task_of_any(client, [s["ID"] for s in services]) is None

    with contextlib.suppress(WaitTimeoutError):
        wait_until(tasks_gone, timeout, f"the tasks of run {name} to go from their nodes", interval=0.3)
    api = swarm_api(client)
    for net in api.networks(filters=filters):
        if not _remove(api.remove_network, net["Id"], timeout, "the run's network"):
            left.append(f"network {net['Name']}")
    for secret in swarm_api(client).secrets(filters=filters):
        with contextlib.suppress(docker.errors.NotFound):
            swarm_api(client).remove_secret(secret["ID"])
    for volume in api.volumes(filters=filters).get("Volumes") or []:
        if not _remove(api.remove_volume, volume["Name"], timeout, "the collector's volume"):
            left.append(f"volume {volume['Name']}")
    return left


def _ours(labels: dict[str, str] | None) -> bool:
    return (labels or {}).get(LABEL_MANAGED) == "true"


def _remove(remove: Any, ident: str, timeout: float, what: str) -> bool:
    """Remove an object, again while it is still in use (a task's container leaving it); whether it went."""

    def once() -> bool:
        try:
            remove(ident)
        except docker.errors.NotFound:
            return True
        except docker.errors.APIError:
            return False
        return True

    try:
        return wait_until(once, timeout, f"{what} to be removed", interval=0.3)
    except WaitTimeoutError:
        return False

"""The Swarm service specs of a run and of its collector, decided here from the run's record alone (pure: the
engine is asked nothing), so every option a run's task gets is read in one place.

A run's task is hardened as the container backend's container is (orch.backends.docker.boot.create): root only for
its init, no capability but the init's, a read-only root, tmpfs /tmp and home, the pids, memory and CPU
limits, the firewall applied inside. What Swarm 20.10 cannot set on a service (`no-new-privileges`, a seccomp
profile, swap, tmpfs `exec`) the init does itself where it can (no_new_privs first), and `cluster.GAPS` says
the rest. It is a replicated service of one task that is never restarted (not a `replicated-job`: Docker
20.10 keeps a removed job's tasks, containers and volumes on the nodes, moby/moby#42789).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from docker.types import (
    ContainerSpec,
    EndpointSpec,
    Mount,
    Placement,
    Resources,
    RestartPolicy,
    SecretReference,
    ServiceMode,
    TaskTemplate,
)

from orch.backends.docker.boot import FIREWALL_CAPS, INIT_CAPS, TMPFS_SIZE, run_env
from orch.backends.swarm.names import (
    BOOT_SECRET,
    COLLECTOR_PORT,
    HOME_MOUNT,
    ROLE_COLLECTOR,
    ROLE_HOME,
    ROLE_RUN,
    SYNC_SECRET,
    collector_name,
    home_volume,
    secret_name,
    service_name,
    swarm_labels,
)
from orch.backends.swarm.record import SwarmInfo
from orch.container.layout import HOME, PYTHON, TINI, WORKDIR, run_mount
from orch.fleet.caps import container_pids
from orch.run.records import EgressMode, RunInfoBase
from orch.run.records import byte_size as to_bytes
from orch.run.uids import READ_ALL
from orch.settings.compose import UID
from orch.settings.internal import BOOT_FILE, GID, PROMPTS, SWARM_LIFE
from orch.settings.user import GATEWAY_UID, SWARM_SYNC_INTERVAL

CPU_PER_WORKER = 0.25
"""CPUs reserved per worker: a node is chosen only if it has them free (the limit is the run's `--cpus`)."""
MEMORY_PER_WORKER = "512m"
"""Memory reserved per worker when the run sets no per-worker cap (else that cap)."""
STOP_GRACE = 90.0
"""Seconds a task gets to stop (the controller's teardown, then the last pass home) before it is killed."""
COLLECTOR_CAPS = ["CHOWN", "SETUID", "SETGID", "SETPCAP"]
"""The collector's start: its volume to the run's uid, then down to that uid with none of these."""
COLLECTOR_MEMORY = 512 << 20
COLLECTOR_PIDS = 256


@dataclass(frozen=True)
class Task:
    """What one life's task needs beyond the run's record: its life, its secrets, its network, its command."""

    life: int
    boot_secret: str
    sync_secret: str
    network: str
    command: list[str]
    """What the task runs once home is restored: `orch serve-run NAME ...`."""
    constraints: list[str]
    """The run's own constraints and, with a per-node cap, the nodes that are full."""
    prompts: dict[int, str]
    """The workers' first prompts (a first life's, as `orch up --prompt` gives them)."""


def uid_gid(swarm: SwarmInfo) -> tuple[int, int]:
    uid, _, gid = swarm.user.partition(":")
    return int(uid), int(gid or uid)


def reservations(info: RunInfoBase, swarm: SwarmInfo) -> tuple[int, int]:
    """(memory bytes, nano CPUs) a node must have free: the fleet's size, capped by the run's limits."""
    per_worker = info.caps.memory or int(str(to_bytes(MEMORY_PER_WORKER)))
    limit = int(str(to_bytes(swarm.options.memory))) if swarm.options.memory else None
    memory = info.workers * per_worker
    cpus = min(info.workers * CPU_PER_WORKER, swarm.options.cpus)
    return (min(memory, limit) if limit else memory), int(cpus * 1e9)


def run_service(info: RunInfoBase, swarm: SwarmInfo, task: Task) -> dict[str, Any]:
    """`create_service`'s arguments for one life of the run."""
    name, opts = info.name, swarm.options
    uid, gid = uid_gid(swarm)
    env = run_env(uid, gid, opts) | {
        BOOT_FILE.name: f"/run/secrets/{BOOT_SECRET}",
        SWARM_LIFE.name: str(task.life),
        SWARM_SYNC_INTERVAL.name: f"{SWARM_SYNC_INTERVAL.get():g}",
    }
    if task.prompts:
        env[PROMPTS.name] = json.dumps({str(n): text for n, text in task.prompts.items()})
    gateway_uid = str(GATEWAY_UID.get())
    secrets = [
        SecretReference(
            task.boot_secret, secret_name(name, BOOT_SECRET, task.life), BOOT_SECRET, gateway_uid, gateway_uid, 0o400
        ),
        SecretReference(
            task.sync_secret, secret_name(name, SYNC_SECRET, task.life), SYNC_SECRET, str(uid), str(gid), 0o400
        ),
    ]
    mine = swarm_labels(name, ROLE_RUN, task.life)  # anonymous volumes: removed with the task's container
    mounts = [
        Mount(run_mount(name), "", type="volume", labels=mine),
        Mount(WORKDIR, "", type="volume", labels=mine),
        _tmpfs("/tmp", 0o1777),
        _tmpfs(HOME, 0o700),
    ]
    caps = INIT_CAPS + [READ_ALL.upper()] + (FIREWALL_CAPS if opts.egress is not EgressMode.OPEN else [])
    container = ContainerSpec(
        swarm.image,
        command=[PYTHON, "-m", "orch.backends.swarm.task", name, "--", TINI, "--", *task.command],
        hostname=service_name(name)[:63],
        env=[f"{key}={value}" for key, value in env.items()],
        workdir=WORKDIR,
        user="0:0",  # for the init alone, which drops to ORCH_UID:ORCH_GID before the run starts
        labels=swarm_labels(name, ROLE_RUN, task.life),
        mounts=mounts,
        stop_grace_period=int(STOP_GRACE * 1e9),
        secrets=secrets,
        read_only=True,
        cap_add=[f"CAP_{cap}" for cap in caps],
        cap_drop=["ALL"],
    )
    memory, cpus = reservations(info, swarm)
    limit = int(str(to_bytes(opts.memory))) if opts.memory else None
    resources = Resources(cpu_limit=int(opts.cpus * 1e9), mem_limit=limit, cpu_reservation=cpus, mem_reservation=memory)
    resources.setdefault("Limits", {})["Pids"] = container_pids(info.caps, info.workers, opts.pids)
    template = TaskTemplate(
        container,
        resources=resources,
        restart_policy=RestartPolicy(condition="none"),
        placement=Placement(constraints=task.constraints),
        networks=[task.network, *([opts.network] if opts.network else [])],  # `--network`: one more to join
    )
    return {
        "task_template": template,
        "name": service_name(name),
        "labels": swarm_labels(name, ROLE_RUN, task.life),
        "mode": ServiceMode("replicated", replicas=1),
        "endpoint_spec": EndpointSpec(mode="dnsrr"),
    }


def collector_service(info: RunInfoBase, swarm: SwarmInfo, life: int, sync_secret: str, network: str) -> dict[str, Any]:
    """`create_service`'s (and `update_service`'s) arguments for the run's collector, on the manager node
    that `DOCKER_HOST` names, taking passes from `life`."""
    name = info.name
    uid, gid = uid_gid(swarm)
    container = ContainerSpec(
        swarm.image,
        command=[PYTHON, "-m", "orch.backends.swarm.collector", "--life", str(life), "--port", str(COLLECTOR_PORT)],
        # A whole folder served to a new task is staged in the volume, not in the tmpfs /tmp (memory).
        env=[f"{UID.name}={uid}", f"{GID.name}={gid}", f"TMPDIR={HOME_MOUNT}/tmp"],
        user="0:0",
        labels=swarm_labels(name, ROLE_COLLECTOR, life),
        mounts=[
            Mount(HOME_MOUNT, home_volume(name), type="volume", labels=swarm_labels(name, ROLE_HOME)),
            _tmpfs("/tmp", 0o1777),
        ],
        secrets=[
            SecretReference(sync_secret, secret_name(name, SYNC_SECRET, life), SYNC_SECRET, str(uid), str(gid), 0o400)
        ],
        read_only=True,
        cap_add=[f"CAP_{cap}" for cap in COLLECTOR_CAPS],
        cap_drop=["ALL"],
    )
    resources = Resources(mem_limit=COLLECTOR_MEMORY)
    resources.setdefault("Limits", {})["Pids"] = COLLECTOR_PIDS
    template = TaskTemplate(
        container,
        resources=resources,
        restart_policy=RestartPolicy(condition="any"),
        placement=Placement(constraints=[f"node.id=={swarm.manager_node}"]),
        networks=[network],
    )
    return {
        "task_template": template,
        "name": collector_name(name),
        "labels": swarm_labels(name, ROLE_COLLECTOR, life),
        "mode": ServiceMode("replicated", replicas=1),
        "endpoint_spec": EndpointSpec(mode="dnsrr"),
    }


def serve_command(name: str, boot_timeout: float, drive: bool, resume: bool) -> list[str]:
    """The task's run: `orch serve-run` (with `--drive`, the controller too; `--resume`, a later life)."""
    command = ["orch", "serve-run", name, "--boot-timeout", f"{boot_timeout:g}"]
    return command + (["--drive"] if drive else []) + (["--resume"] if resume else [])


def _tmpfs(target: str, mode: int) -> Mount:
    size = int(str(to_bytes(TMPFS_SIZE)))
    return Mount(target, None, type="tmpfs", tmpfs_size=size, tmpfs_mode=mode)

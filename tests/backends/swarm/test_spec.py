"""A swarm run's task and its collector, as their service specs say (pure: the engine is asked nothing)."""

from __future__ import annotations

import json

import pytest

from orch.backends.docker.boot import FIREWALL_CAPS, INIT_CAPS
from orch.backends.swarm import spec
from orch.backends.swarm.names import BOOT_SECRET, SYNC_SECRET
from orch.backends.swarm.record import SwarmInfo
from orch.run.records import ContainerOptions, EgressMode, LocalRunInfo, WorkerCaps
from orch.settings.internal import BOOT_FILE, PROMPTS, SWARM_LIFE
from orch.settings.user import GATEWAY_UID, WORKER_UID_BASE

pytestmark = pytest.mark.pure


def _run(workers: int = 3, caps: WorkerCaps | None = None) -> LocalRunInfo:
    return LocalRunInfo(
        name="demo", agent="claude", workers=workers, workdir="/workspace", permission_mode="default",
        tmux_socket="t", orch_version="0", caps=caps or WorkerCaps(),
    )  # fmt: skip


def _task(life: int = 1, prompts: dict[int, str] | None = None) -> spec.Task:
    command = spec.serve_command("demo", 120, drive=True, resume=life > 1)
    return spec.Task(life, "boot-id", "sync-id", "net-id", command, ["node.labels.zone==eu"], prompts or {})


def test_a_runs_task_is_hardened_as_a_runs_container_is() -> None:
    swarm = SwarmInfo(image="sha256:abc", options=ContainerOptions(egress=EgressMode.ALLOWLIST, pids=4096))
    args = spec.run_service(_run(), swarm, _task())
    template = args["task_template"]
    container = template["ContainerSpec"]
    assert args["mode"] == {"replicated": {"Replicas": 1}} and args["endpoint_spec"]["Mode"] == "dnsrr"
    assert template["RestartPolicy"]["Condition"] == "none"  # a lost life is resumed on purpose, never by Swarm
    assert container["ReadOnly"] is True and container["User"] == "0:0" and container["CapabilityDrop"] == ["ALL"]
    wanted = {f"CAP_{cap}" for cap in [*INIT_CAPS, *FIREWALL_CAPS, "DAC_READ_SEARCH"]}
    assert set(container["CapabilityAdd"]) == wanted
    assert container["Command"][:4] == ["/opt/orch/bin/python", "-m", "orch.backends.swarm.task", "demo"]
    assert container["Command"][-2:] == ["120", "--drive"]
    secrets = {s["File"]["Name"]: s for s in container["Secrets"]}
    assert secrets[BOOT_SECRET]["File"]["UID"] == str(GATEWAY_UID.get())
    assert secrets[SYNC_SECRET]["File"]["UID"] == "1000" and {s["File"]["Mode"] for s in secrets.values()} == {0o400}
    env = dict(e.split("=", 1) for e in container["Env"])
    assert env[BOOT_FILE.name] == f"/run/secrets/{BOOT_SECRET}" and env[SWARM_LIFE.name] == "1"
    assert not any("KEY" in key or "TOKEN" in key for key in env)  # no credential travels in the spec
    assert env[WORKER_UID_BASE.name] == str(WORKER_UID_BASE.get())  # a run from before ranges

    assert template["Resources"]["Limits"]["Pids"] >= 4096 and template["Placement"]["Constraints"] == [
        "node.labels.zone==eu"
    ]
    mounts = {m["Target"]: m for m in container["Mounts"]}
    assert mounts["/orch/runs/demo"]["Type"] == "volume" and not mounts["/orch/runs/demo"]["Source"]
    assert mounts["/tmp"]["Type"] == mounts["/home/worker"]["Type"] == "tmpfs"


def test_a_runs_task_carries_its_runs_own_worker_uid_range() -> None:
    swarm = SwarmInfo(image="sha256:abc", options=ContainerOptions(worker_uid_base=0x7000_0400))
    env = dict(
        e.split("=", 1) for e in spec.run_service(_run(), swarm, _task())["task_template"]["ContainerSpec"]["Env"]
    )
    assert env[WORKER_UID_BASE.name] == str(0x7000_0400)


def test_reservations_come_from_the_fleets_size() -> None:
    swarm = SwarmInfo(image="i", options=ContainerOptions(memory="8g", cpus=2.0))
    assert spec.reservations(_run(3), swarm) == (3 * 2 << 30, int(0.75e9))  # the workers' memory caps
    assert spec.reservations(_run(8), swarm) == (8 << 30, int(2e9))  # never beyond the run's own limits
    uncapped = _run(2, WorkerCaps.off())
    assert spec.reservations(uncapped, swarm)[0] == 2 * 512 << 20


def test_egress_open_leaves_out_the_firewalls_capabilities_and_prompts_go_in_once() -> None:
    swarm = SwarmInfo(image="i", options=ContainerOptions(egress=EgressMode.OPEN))
    container = spec.run_service(_run(), swarm, _task(prompts={1: "look at pages.py"}))["task_template"][
        "ContainerSpec"
    ]
    assert not {f"CAP_{cap}" for cap in FIREWALL_CAPS} & set(container["CapabilityAdd"])
    env = dict(e.split("=", 1) for e in container["Env"])
    assert json.loads(env[PROMPTS.name]) == {"1": "look at pages.py"}
    assert spec.serve_command("demo", 60, drive=False, resume=True)[-1] == "--resume"


def test_the_collector_runs_on_the_manager_node_and_holds_its_lifes_token() -> None:
    swarm = SwarmInfo(image="i", manager_node="mgr-node-id", user="1000:1000")
    args = spec.collector_service(_run(), swarm, 2, "sync-2", "net-id")
    template = args["task_template"]
    container = template["ContainerSpec"]
    assert template["Placement"]["Constraints"] == ["node.id==mgr-node-id"]
    assert container["Command"][-4:] == ["--life", "2", "--port", "7450"]
    assert container["Secrets"] == [
        {"File": {"Name": SYNC_SECRET, "UID": "1000", "GID": "1000", "Mode": 0o400}, "SecretID": "sync-2",
         "SecretName": "orch-demo-sync-2"}
    ]  # fmt: skip
    assert template["RestartPolicy"]["Condition"] == "any" and container["ReadOnly"] is True

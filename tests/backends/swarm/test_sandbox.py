"""Swarm runs on a real swarm of three engines (tests/swarmtest.py), driven through the manager alone: a lead
run placed on a worker by constraint comes home whole and ends as a container run of its spec does; a fleet's
task is confined as a run's container is, its workers reach what its allowlist names on a network it joins
and never its collector, and its credential reaches its gateway alone; nothing of either is left on any node
after it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from docker.models.containers import Container

from orch.backends.swarm.backend import SwarmSettings
from orch.backends.swarm.names import COLLECTOR_PORT, collector_name
from orch.backends.swarm.record import SwarmRunInfo
from orch.backends.swarm.sandbox import SwarmSandbox
from orch.backends.swarm.service import network_id, swarm_api
from orch.container.layout import PYTHON
from orch.contracts import OrchCommand, UpRequest
from orch.entry.demo import EXPECTED
from orch.errors import DeliveryError
from orch.run.folder import RunFolder
from orch.run.records import ContainerOptions, EgressMode, Isolation, RunStatus
from orch.waits import wait_until
from tests.dockertest import GATEWAY_UID, RUN_UID, unique, worker_uid
from tests.swarmtest import Cluster, demo_run, findings

pytestmark = [pytest.mark.swarm, pytest.mark.timeout(900)]

CANARY = "sk-ant-api03-SWARM-CANARY-0123456789abcdef"
LISTEN = (
    "import socket; s = socket.create_server(('0.0.0.0', 8080)); "
    "print('listening', flush=True)\nwhile True: s.accept()[0].close()"
)
CONNECT = """
import json, socket, sys
out = {}
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        out[target] = "connected"
    except OSError as exc:
        out[target] = type(exc).__name__
print(json.dumps(out))
"""

PROCS = """
import json, os
out = []
for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
    try:
        text = open(f"/proc/{pid}/status").read()
    except OSError:
        continue
    out.append({"pid": pid, **dict(line.split(":\\t", 1) for line in text.splitlines() if ":\\t" in line)})
print(json.dumps(out))
"""


def test_a_lead_run_placed_on_a_worker_comes_home_whole(manager: Cluster) -> None:
    name = unique("sw-demo")
    box, run = demo_run(name, manager.image, ["node.labels.orch.node==w1"])
    try:
        args = ["run", "--resume", name, "--no-result", "--no-commentary"]
        code = box.forward(run.info(), OrchCommand(args, lambda: 0))
        info = run.info()
        assert isinstance(info, SwarmRunInfo) and [life.node for life in info.swarm.lives] == ["orch-sw-w1"]
        assert code == 0 and findings(run) == EXPECTED  # as the demo ends in a container: as designed
        for path in (run.report_json, run.events, run.controller_state, run.model_ledger, run.model_usage):
            assert path.is_file() and path.stat().st_size > 0, path
        assert len(list(run.verdicts_dir.glob("*.json"))) == 4  # each finding, by its two other workers
    finally:
        box.kill(run.info())
    assert run.info().status is RunStatus.STOPPED and manager.leftovers(name) == []


def test_a_fleets_task_is_confined_held_to_its_allowlist_and_its_credential_is_the_gateways(
    manager: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)
    api = swarm_api(manager.engine("mgr"))
    net_name = unique("orch-egress-test")  # a network the run joins, where two services listen
    net = api.create_network(net_name, driver="overlay", attachable=True)["Id"]
    listeners = [_listener(api, manager.image, net, f"{net_name}-{n}") for n in ("listed", "unlisted")]
    try:
        _a_fleet(manager, tmp_path, api, net, net_name, listeners)
    finally:
        for sid in listeners:
            api.remove_service(sid)
        wait_until(lambda: _removed(api, net), 120, "the test's network to be removable")


def _a_fleet(manager: Cluster, tmp_path: Path, api: Any, net: str, net_name: str, listeners: list[str]) -> None:
    listed, unlisted = (_address(api, sid, net) for sid in listeners)
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "README.md").write_text("a project\n")
    name = unique("sw-fleet")
    options = ContainerOptions(egress=EgressMode.ALLOWLIST, allow=[listed], network=net_name)
    box = SwarmSandbox(
        SwarmSettings(image=manager.image, options=options, boot_timeout=120, constraints=["node.labels.orch.node==w2"])
    )
    request = UpRequest(name, 2, "scripted", workdir, "default", isolation=Isolation.STRICT)
    info = box.up(request)
    run = RunFolder.for_name(name)
    try:
        assert isinstance(info, SwarmRunInfo) and info.status is RunStatus.RUNNING
        node = manager.engine("w2")
        (container,) = node.containers.list(filters={"label": f"orch.run={name}", "status": "running"})
        procs = json.loads(_exec(container, [PYTHON, "-c", PROCS], RUN_UID)[1])
        run_procs = [p for p in procs if p["pid"] != procs[-1]["pid"]]  # all but this look itself
        assert run_procs and all(p["NoNewPrivs"] == "1" for p in run_procs)
        assert all(p["Uid"].split()[0] != "0" for p in run_procs)  # nothing of the run is root
        workers = [p for p in run_procs if int(p["Uid"].split()[0]) in (worker_uid(info, 1), worker_uid(info, 2))]
        assert workers and all(int(p["CapEff"], 16) == 0 and int(p["CapBnd"], 16) == 0 for p in workers)
        for uid in (worker_uid(info, 1), RUN_UID):  # a worker, and the controller: the boot secret is the gateway's
            code, out = _exec(container, ["cat", "/run/secrets/orch-boot"], uid)
            assert code != 0 and CANARY.encode() not in out
        assert CANARY.encode() in _exec(container, ["cat", "/run/secrets/orch-boot"], GATEWAY_UID)[1]
        assert _exec(container, ["cat", "/run/secrets/orch-sync"], worker_uid(info, 1))[0] != 0
        assert _exec(container, ["touch", "/x"], RUN_UID)[0] != 0  # a read-only root
        assert _exec(container, ["touch", "/workspace/x"], worker_uid(info, 1))[0] != 0  # the tree is the run uid's
        inspected = json.dumps([api.inspect_service(life.service) for life in info.swarm.lives])
        assert CANARY not in inspected and CANARY not in json.dumps(container.attrs)
        logs = container.logs(stdout=True, stderr=True)  # what `docker service logs` shows, from its source
        assert b"orch-init: egress allowlist" in logs and CANARY.encode() not in logs
        # The allowlist, and the collector: the run's uid's way home alone.
        collector = _address(api, collector_name(name), network_id(manager.engine("mgr"), name))
        targets = [f"{listed}:8080", f"{unlisted}:8080", f"{collector}:{COLLECTOR_PORT}"]
        worker = _connect(container, worker_uid(info, 1), targets)
        assert worker == {targets[0]: "connected", targets[1]: "OSError", targets[2]: "OSError"}, worker
        assert _connect(container, RUN_UID, targets[2:]) == {targets[2]: "connected"}
        with pytest.raises(DeliveryError, match="runs on swarm node orch-sw-w2: `orch send`"):
            box.forward(info, OrchCommand(["send", name, "1", "hi"], lambda: 0))
    finally:
        box.kill(run.info())
    for path in run.root.rglob("*"):
        assert not path.is_file() or CANARY.encode() not in path.read_bytes(), path
    assert manager.leftovers(name) == []


def _exec(container: Container, argv: list[str], uid: int) -> tuple[int, bytes]:
    """A command in the run's task as `uid`, through its node's engine (the manager has no way in)."""
    result = container.exec_run(argv, user=str(uid))
    assert isinstance(result.output, bytes)
    return int(result.exit_code or 0), result.output


def _listener(api: Any, image: str, net: str, name: str) -> str:
    spec = {
        "ContainerSpec": {"Image": image, "Command": [PYTHON, "-c", LISTEN], "User": "1000:1000"},
        "Placement": {"Constraints": ["node.labels.orch.node==w2"]},
        "Networks": [{"Target": net}],
        "RestartPolicy": {"Condition": "none"},
    }
    return str(api.create_service(spec, name=name, endpoint_spec={"Mode": "dnsrr"})["ID"])


def _address(api: Any, sid: str, net: str) -> str:
    def address() -> str | None:
        for task in api.tasks(filters={"service": sid}):
            if (task.get("Status") or {}).get("State") != "running":
                continue
            for attached in task.get("NetworksAttachments") or []:
                if attached["Network"]["ID"] == net and attached.get("Addresses"):
                    return str(attached["Addresses"][0]).split("/")[0]
        return None

    return wait_until(address, 120, f"listener {sid[:12]} to run", interval=0.5)


def _connect(task: Container, uid: int, targets: list[str]) -> dict[str, str]:
    result = task.exec_run([PYTHON, "-c", CONNECT, *targets], user=str(uid))
    assert isinstance(result.output, bytes)
    return dict(json.loads(result.output))


def _removed(api: Any, net: str) -> bool:
    try:
        api.remove_network(net)
    except Exception:  # still in use while the listeners' tasks go
        return False
    return True

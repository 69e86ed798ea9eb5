"""A swarm run's egress: its task's own firewall holds its workers to the allowlist on a network it joins, and
keeps them from the run's collector, which only the run's uid reaches."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from docker.models.containers import Container

from orch.backends.swarm.names import COLLECTOR_PORT, collector_name
from orch.backends.swarm.sandbox import SwarmSandbox, SwarmSettings
from orch.backends.swarm.service import network_id, swarm_api
from orch.container.layout import PYTHON
from orch.contracts import UpRequest
from orch.run.folder import RunFolder
from orch.run.records import ContainerOptions, EgressMode, Isolation
from orch.run.uids import worker_uid
from orch.waits import wait_until
from tests.dockertest import RUN_UID, unique
from tests.swarmtest import Cluster

pytestmark = [pytest.mark.swarm, pytest.mark.timeout(900)]

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


def test_workers_reach_the_allowlist_alone_and_never_the_collector(manager: Cluster, tmp_path: Path) -> None:
    api = swarm_api(manager.engine("mgr"))
    net_name = unique("orch-egress-test")
    net = api.create_network(net_name, driver="overlay", attachable=True)["Id"]
    listeners = [_listener(api, manager.image, net, f"{net_name}-{n}") for n in ("listed", "unlisted")]
    try:
        listed, unlisted = (_address(api, sid, net) for sid in listeners)
        workdir = tmp_path / "work"
        workdir.mkdir()
        name = unique("sw-egress")
        options = ContainerOptions(egress=EgressMode.ALLOWLIST, allow=[listed], network=net_name)
        box = SwarmSandbox(SwarmSettings(manager.image, options, 120, ["node.labels.orch.node==w1"]))
        box.up(UpRequest(name, 1, "scripted", workdir, "default", offline=True, isolation=Isolation.STRICT))
        run = RunFolder.for_name(name)
        try:
            (task,) = manager.engine("w1").containers.list(filters={"label": f"orch.run={name}"})
            engine = manager.engine("mgr")
            collector = _address(api, collector_name(name), network_id(engine, name))
            targets = [f"{listed}:8080", f"{unlisted}:8080", f"{collector}:{COLLECTOR_PORT}"]
            worker = _connect(task, worker_uid(1), targets)
            assert worker == {targets[0]: "connected", targets[1]: "OSError", targets[2]: "OSError"}, worker
            assert _connect(task, RUN_UID, targets[2:]) == {targets[2]: "connected"}  # the syncer's way home
        finally:
            box.kill(run.info())
        assert manager.leftovers(name) == []
    finally:
        for sid in listeners:
            api.remove_service(sid)
        wait_until(lambda: _removed(api, net), 120, "the test's network to be removable")


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

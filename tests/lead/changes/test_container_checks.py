"""The checks' sandbox in a run's container (real Docker, the worker image): the container's firewall as the
init applies it, the run's uid holding only what strict isolation keeps, and the checks as their own uid."""

from __future__ import annotations

import json
import textwrap

import docker
import pytest

from orch.backends.docker.boot import FIREWALL_CAPS, INIT_CAPS
from orch.container.layout import PYTHON
from orch.run.uids import checks_uid

pytestmark = pytest.mark.docker

RUN_UID = 1000

# As the init: the firewall (egress none), then down to the run's uid keeping what a strict run keeps.
OUTER = f"""
import os
from orch.container import egress
from orch.run.records import EgressMode
from orch.run.uids import SWITCH_CAPS, drop_argv
egress.write_report(egress.apply(EgressMode.NONE, []))
os.execvp("setpriv", [*drop_argv({RUN_UID}, {RUN_UID}, SWITCH_CAPS), "{PYTHON}", "-c", os.environ["INNER"]])
"""

# As the controller: a listener of its own on loopback, a tree, the checks.
INNER = textwrap.dedent(
    """
    import json, pathlib, socket, tempfile
    from orch.lead.changes.checkwatch import CheckLimits, owned
    from orch.lead.changes.gate import run_checks, sandbox_kind
    from orch.procs import of_uids as processes_of
    from orch.run.uids import checks_uid
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    tree = pathlib.Path(tempfile.mkdtemp()) / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("hello")
    secret = pathlib.Path(tempfile.mkdtemp()) / "controller-only"
    secret.write_text("s")
    net = "PY -c \\"import socket,sys; s=socket.socket(); s.settimeout(3); "
    net += "s.connect((sys.argv[1], int(sys.argv[2])))\\""
    checks = [
        "id -u && cat a.txt && echo more > b.txt && test -f b.txt",
        f"{net} 127.0.0.1 {port}",
        f"{net} 1.1.1.1 53",
        f"cat {secret}",
        f"touch {tree}/c.txt",
        "(sleep 600 &) ; sleep 600 & echo started",
        "sleep 100",
        "PY -c 'import time; b = bytes(100 << 20) + bytes(1); time.sleep(60)'",
        "head -c 12M /dev/zero > a && head -c 12M /dev/zero > b && sleep 60",
    ]
    results = run_checks(checks, tree, limits=CheckLimits(timeout=3, memory=48 << 20, disk=16 << 20))
    def alive(pid):
        return pathlib.Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    print(json.dumps({
        "kind": sandbox_kind(),
        "results": [r.model_dump() for r in results],
        "left": sorted(p.name for p in tree.iterdir()),
        # Alive, not zombies: this process is the container's pid 1 here, and reaps nothing.
        "procs": [p for p in processes_of({checks_uid()}) if alive(p)],
        "tmp": owned(pathlib.Path("/tmp"), checks_uid()),
    }))
    """
)


def test_checks_run_as_their_own_uid_with_no_network(engine: docker.DockerClient, image: str) -> None:
    out = engine.containers.run(
        image,
        entrypoint=[PYTHON, "-c", OUTER],
        user="0:0",
        environment={"INNER": INNER.replace("PY -c", f"{PYTHON} -c"), "ORCH_IN_CONTAINER": "1", "HOME": "/tmp"},
        cap_drop=["ALL"],
        cap_add=INIT_CAPS + FIREWALL_CAPS,
        security_opt=["no-new-privileges:true"],
        read_only=True,
        tmpfs={"/tmp": "rw,exec,nosuid,nodev,size=64m,mode=1777"},
        remove=True,
        stdout=True,
        stderr=True,
    )
    data = json.loads(out.decode().strip().splitlines()[-1])
    assert data["kind"] == "uid"
    ident, loopback, outside, secret, write, leftover, slow, hog, filler = data["results"]
    assert ident["exit_code"] == 0 and ident["output_tail"].split()[:2] == [str(checks_uid()), "hello"]
    assert loopback["exit_code"] != 0 and outside["exit_code"] != 0  # no network, loopback included
    assert secret["exit_code"] != 0 and write["exit_code"] != 0  # the controller's files are its own
    assert data["left"] == ["a.txt"]  # the check wrote its own copy, never the controller's
    assert leftover["exit_code"] == 0 and data["procs"] == []  # whatever a check leaves running is killed
    assert slow["timed_out"] and slow["exit_code"] is None
    # Past a cap (memory; the disk of the /tmp it shares with the controller): stopped, nothing of it left there.
    assert hog["stopped"].startswith("over the checks' memory cap"), hog
    assert filler["stopped"].startswith("over the checks' disk cap"), filler
    assert data["tmp"] == 0

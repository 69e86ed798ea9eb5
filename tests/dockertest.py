"""Shared pieces of the docker tests: the engine, the image, unique run names, workdirs, cleanup.

Tests that use these skip when no engine answers, except under CI=true, where they fail.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import struct
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
import yaml

from orch.agents.registry import ALL_AGENTS
from orch.backends.docker.engine import docker_client
from orch.backends.docker.image import build_image, image_is_current
from orch.container.egress import DNS_UID
from orch.container.layout import LABEL_RUN, ROOT_HOST_UID
from orch.errors import SandboxError, UsageError
from orch.run.folder import RunFolder
from orch.run.records import DockerRunInfo, RunInfo
from orch.settings import user
from orch.versions import CLAUDE_CODE_VERSION
from orch.waits import wait_until
from tests.helpers import run_events

BASE = os.environ.get("ORCH_BASE_IMAGE") or "orch-base:bookworm"
CA_BUNDLE = Path(os.environ["ORCH_CA_BUNDLE"]) if os.environ.get("ORCH_CA_BUNDLE") else None
IMAGE = user.IMAGE.get()  # ORCH_IMAGE: a developer's own tag beside CI's
IMAGE_AGENTS = (ALL_AGENTS,)
"""The one statement of what the tests' image carries: every agent the worker image can carry (`orch image
build --agents all`). scripts/test.sh builds the image with these, the `image` fixture checks it against them."""
BUILD_TIMEOUT = 1800
SIOCGIFADDR = 0x8915  # linux/sockios.h: an interface's IPv4 address
# The uid the containers run as when the tests run as root (CI), else the invoking user's.
RUN_UID = ROOT_HOST_UID if os.getuid() == 0 else os.getuid()
GATEWAY_UID = int(user.GATEWAY_UID.default)  # the model gateway's, in a run's container


def worker_uid(info: RunInfo, n: int) -> int:
    """Worker n's uid in a container run's container: in its range (orch.run.uids.range_base, in its record)."""
    swarm = getattr(info, "swarm", None)
    options = (
        swarm.options if swarm is not None else info.container.options if isinstance(info, DockerRunInfo) else None
    )
    assert options is not None, f"run {info.name} is not a container run"
    return options.uid_base() + n


@pytest.fixture(scope="session")
def engine() -> docker.DockerClient:
    try:
        return docker_client()
    except UsageError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs a Docker engine (.ci/run starts one): {exc.one_line()}")
        pytest.skip(f"no Docker engine answers: {exc.one_line()}")


@pytest.fixture(scope="session")
def image(engine: docker.DockerClient) -> str:
    """The worker image (ORCH_IMAGE, default orch:latest) with IMAGE_AGENTS, built from the current sources
    unless it already is."""
    if image_is_current(IMAGE, BASE, CLAUDE_CODE_VERSION, IMAGE_AGENTS):
        return IMAGE
    log: list[str] = []
    try:
        build_image(BASE, CLAUDE_CODE_VERSION, CA_BUNDLE, IMAGE, log.append, IMAGE_AGENTS)
    except (UsageError, SandboxError) as exc:
        tail = "\n".join(log[-40:])
        pytest.fail(f"building {IMAGE} failed: {exc.one_line()}\n--- last build output ---\n{tail}")
    return IMAGE


def bridge_address(engine: docker.DockerClient) -> str:
    """The host's address on the engine's default bridge, where containers reach the host. Engines do not
    all say it in the network's IPAM config (a fresh Debian dockerd gives only the subnet): then ask the
    bridge interface itself."""
    attrs = engine.networks.get("bridge").attrs
    for config in attrs["IPAM"].get("Config") or []:
        if config.get("Gateway"):
            return str(config["Gateway"])
    interface = (attrs.get("Options") or {}).get("com.docker.network.bridge.name", "docker0")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        packed = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, struct.pack("256s", interface.encode()[:15]))
    return socket.inet_ntoa(packed[20:24])


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def names(engine: docker.DockerClient) -> Iterator[list[str]]:
    """Run names a test uses; whatever the engine still holds for them is removed afterwards."""
    used: list[str] = []
    yield used
    for name in used:
        for container in engine.containers.list(
            all=True, filters={"label": f"{LABEL_RUN}={name}"}, ignore_removed=True
        ):
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)
        for volume in engine.volumes.list(filters={"label": f"{LABEL_RUN}={name}"}):
            with contextlib.suppress(docker.errors.NotFound):
                volume.remove(force=True)


def new_name(names: list[str], prefix: str = "dk") -> str:
    name = unique(prefix)
    names.append(name)
    return name


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A workdir the container's uid may write (the tests run as root in CI)."""
    path = tmp_path / "work"
    path.mkdir()
    (path / "README.md").write_text("a project\n")
    if os.getuid() == 0:
        for p in (path, path / "README.md"):
            os.chown(p, RUN_UID, RUN_UID)
    return path


def script_brief(run: RunFolder, n: int, extra: list[dict[str, str]] | None = None) -> str:
    """A brief whose orch-script makes the real Claude Code post, write its result and finish.

    Paths are the container's: the brief is read inside it.
    """
    inside = f"/orch/runs/{run.name}"
    steps = [
        {"bash": f"orch bus post {run.name} --as {n} 'worker {n} checked in'"},
        *(extra or []),
        {"write": f"{inside}/outbox/agent-{n}/result.md", "content": f"# Result of worker {n}\nall good\n"},
        {"bash": f"touch {inside}/outbox/agent-{n}/done"},
        {"reply": "Finished."},
    ]
    script = "\n".join(json.dumps(s) for s in steps)
    return f"# Task for worker {n}\n\nDo the steps.\n\n```orch-script\n{script}\n```\n"


def events(run: RunFolder) -> list[dict[str, Any]]:
    """events.jsonl as JSON (the tests index into `data`, whose shape each event picks)."""
    return run_events(run)


def nothing_left(engine: docker.DockerClient, name: str) -> None:
    assert not RunFolder.for_name(name).root.exists(), "half-created run folder left behind"
    assert not engine.containers.list(all=True, filters={"label": f"{LABEL_RUN}={name}"}, ignore_removed=True), (
        "container left behind"
    )
    assert not engine.volumes.list(filters={"label": f"{LABEL_RUN}={name}"}), "volume left behind"


# Prints one line per process: pid, ppid, uid, CapEff, CapPrm, CapBnd|CapInh|CapAmb, NoNewPrivs, name.
PROCESS_SCRIPT = (
    "import glob,re\n"
    "for p in glob.glob('/proc/[0-9]*/status'):\n"
    "    try: t=open(p).read()\n"
    "    except OSError: continue\n"
    "    f=dict(re.findall(r'^(\\w+):\\s*(.*)$', t, re.M))\n"
    "    print(p.split('/')[2], f['PPid'], f['Uid'].split()[0], f['CapEff'], f['CapPrm'],"
    " '|'.join((f['CapBnd'], f['CapInh'], f.get('CapAmb', '0'))),"
    " f['NoNewPrivs'], f['Name'])\n"
)


def assert_unprivileged(
    out: str, uid: int, gateway_uid: int | None = None, expect: frozenset[str] = frozenset({"claude"})
) -> None:
    """Every process in PID 1's tree (not `docker exec`'s: those have PPid 0) runs as `uid` (or, for the
    model gateway the init started, `gateway_uid`; for its DNS responder, nobody), never root, with empty
    effective, permitted, bounding, inheritable and ambient capability sets, and no-new-privs."""
    rows = [line.split(maxsplit=7) for line in out.splitlines() if line.strip()]
    tree, members = [], {"1"}
    for row in sorted(rows, key=lambda r: int(r[0])):  # parents have lower pids here (no pid wrap-around)
        if row[0] == "1" or row[1] in members:
            members.add(row[0])
            tree.append(row)
    assert {r[7] for r in tree} >= {"tini", "tmux: server", *expect}, tree
    for pid, _ppid, owner, eff, prm, bnd, nnp, comm in tree:
        assert owner in {str(uid), str(gateway_uid), str(DNS_UID)} and owner != "0", (pid, comm)
        assert int(eff, 16) == int(prm, 16) == 0, (pid, comm, eff, prm)
        assert all(int(c, 16) == 0 for c in bnd.split("|")), (pid, comm, "bounding|inheritable|ambient", bnd)
        assert nnp == "1", (pid, comm)


def one_finding_spec(path: Path, workdir: Path, gate: str) -> Path:
    """A 2-worker offline fleet: worker 1 reports one true finding in calc.py; its verifier first runs the
    shell `gate` (a loop to be killed in), then confirms it with evidence."""
    (workdir / "calc.py").write_text("def ratio(a, b):\n    return a / b\n")
    quote = [{"file": "calc.py", "line": 2, "quote": "return a / b"}]
    found = {"id": "F1", "claim": "ratio(a, 0) raises ZeroDivisionError", "severity": "low", "evidence": quote}
    verdict = {"job": "{{job}}", "finding": "{{finding_id}}", "verdict": "CONFIRMED", "reason": "b may be 0"}
    done = [{"bash": "touch {{done_file}}"}, {"reply": "Finished."}]
    finder = [{"write": "{{findings_file}}", "content": json.dumps({"job": "{{job}}", "findings": [found]})}]
    finder.append({"write": "{{result_file}}", "content": "one finding\n"})
    verifier = [{"bash": gate}, {"write": "{{verdict_file}}", "content": json.dumps({**verdict, "evidence": quote})}]
    verifier.append({"write": "{{result_file}}", "content": "checked\n"})
    spec = {
        "workdir": str(workdir),
        "offline": True,
        "workers": 2,
        "tasks": [
            {"id": "t1", "goal": "Determine whether ratio handles every input.", "worker": 1,
             "offline_script": finder + done}
        ],
        "roles": {"verifier": {"offline_script": verifier + done}},
        "timeouts": {"boot": 120, "job": 240, "run": 600},
        "limits": {"nudge_after": 30},
    }  # fmt: skip
    path.write_text(yaml.safe_dump(spec))
    return path


def in_gate(run: RunFolder, marker: str) -> bool:
    """Worker 2 (the verifier) has started the gate step naming `marker` (its hook log says so)."""
    return any(
        e.hook_event_name == "PreToolUse" and marker in str((e.model_extra or {}).get("tool_input"))
        for e in run.hook_events(2)
    )


def kill_container_while_running(
    engine: docker.DockerClient, args: list[str], name: str, ready: Callable[[RunFolder], bool]
) -> None:
    """Start `orch ARGS` (an `orch run`), kill the run's container once `ready(run)`, and check that the
    command then stops with exit 5 and says how to continue."""
    cmd = [sys.executable, "-c", "from orch.cli.main import main; main()", *args]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    run = RunFolder.for_name(name)
    try:
        wait_until(lambda: ready(run), 240, "the verifier to start its check", interval=0.3)
        info = run.info()
        assert isinstance(info, DockerRunInfo)
        engine.containers.get(info.container.id).kill()  # controller and workers gone at once
        out, _ = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 5 and "stopped before the end" in out.decode(), out
    assert f"`orch run --resume {name}` continues it" in out.decode(), out

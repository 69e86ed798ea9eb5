"""A container run's model gateway: the credential goes in out of band and stays with the gateway's uid.

The user's endpoint is orch's scripted model on this machine (on the Docker bridge's address), with a
fresh fake key. The key must reach that endpoint through the gateway, and be nowhere else: not in
`docker inspect`, the container's log, the image, the run folder (recordings included), the environment
of any process a worker can read; a worker can read neither the gateway's memory nor its files, and
cannot reach the endpoint itself, while the gateway can.
"""

from __future__ import annotations

import gzip
import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from orch import settings
from orch.container import mounts
from orch.container.init import GATEWAY_HOME
from orch.container.sandbox import DockerSandbox
from orch.offline.modelserver import ScriptedModelServer, key_digest
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import DockerRunInfo
from tests.dockertest import (
    BUILD_TIMEOUT,
    GATEWAY_UID,
    PROCESS_SCRIPT,
    RUN_UID,
    assert_unprivileged,
    bridge_address,
    events,
    new_name,
)
from tests.helpers import orch

pytestmark = [pytest.mark.docker, pytest.mark.timeout(BUILD_TIMEOUT)]


@pytest.fixture
def secret() -> str:
    return f"sk-ant-test-{secrets.token_hex(16)}"


@pytest.fixture
def upstream(
    engine: docker.DockerClient, monkeypatch: pytest.MonkeyPatch, secret: str
) -> Iterator[ScriptedModelServer]:
    """The scripted model on the bridge's address (containers reach the host there), as the user's endpoint."""
    bridge = bridge_address(engine)
    with ScriptedModelServer(host=bridge) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
        monkeypatch.setenv(settings.DEFAULT_ALLOW.name, "")
        for var in ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"):
            monkeypatch.delenv(var, raising=False)
        yield server


# Run as the run's uid: the gateway's url from its handle, a token minted with the control key, one
# Messages call through the gateway; then a direct call to the endpoint.
THROUGH = """
import json, sys, urllib.error, urllib.request
from orch.gateway.process import GatewayClient, handle_path, load_handle
handle = load_handle(handle_path(sys.argv[1]))
token = GatewayClient(handle).mint_token(7)
body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
req = urllib.request.Request(handle.url + "/t/" + token + "/v1/messages", data=body.encode(),
                             headers={"content-type": "application/json", "x-api-key": token})
with urllib.request.urlopen(req, timeout=20) as r:
    print("through", r.status)
try:
    urllib.request.urlopen(sys.argv[2], timeout=5).read(); print("direct ok")
except urllib.error.HTTPError:
    print("direct ok")
except Exception as exc:
    print("direct blocked", type(exc).__name__)
"""

# Run as the run's uid: every process's uid and whether its environ is readable and holds the secret,
# then the gateway's own directory and memory.
SNOOP = """
import glob, os, sys
secret = sys.argv[1].encode()
for d in glob.glob("/proc/[0-9]*"):
    try:
        uid = os.stat(d).st_uid
    except OSError:
        continue
    try:
        env = open(d + "/environ", "rb").read()
        state = "leak" if secret in env else "clean"
    except OSError:
        state = "denied"
    try:
        open(d + "/mem", "rb").read(1); mem = "readable"
    except OSError:
        mem = "denied"
    print("proc", d.split("/")[2], uid, state, mem)
try:
    os.listdir(sys.argv[2]); print("home readable")
except OSError:
    print("home denied")
"""


def test_credential_reaches_only_the_gateway(
    upstream: ScriptedModelServer, secret: str, image: str, names: list[str], workdir: Path, engine: docker.DockerClient
) -> None:
    name = new_name(names, "gw")
    result = orch("up", name, "--agent", "scripted", "--workdir", workdir)
    assert result.exit_code == 0, result.output
    run = RunFolder.for_name(name)
    info = run.info()
    assert isinstance(info, DockerRunInfo) and info.credential == "x-api-key"
    assert info.container.options.allow == []  # the endpoint is not the workers'
    sandbox = DockerSandbox()

    # Through the gateway the endpoint answers and gets the key; straight from a worker it is refused.
    code, out = sandbox.run_as_user(info, ["python3", "-c", THROUGH, name, upstream.url + "/"])
    assert code == 0, out
    assert "through 200" in out and "direct blocked" in out, out
    calls = [r for r in upstream.requests if r.path == "/v1/messages"]
    assert calls and {(r.auth, r.key_digest) for r in calls} == {("api-key", key_digest(secret))}
    (report,) = [e["data"] for e in events(run) if e["event"] == Event.EGRESS]
    assert isinstance(report, dict) and report["gateway_uid"] == GATEWAY_UID
    assert set(report["gateway"]) == {upstream.host} and upstream.host not in report["allowed"]
    assert str(report["gateway_selftest"]).startswith(f"blocked {upstream.host}:{upstream.port}"), report

    # The gateway runs as its own uid, unprivileged; no process a worker can read holds the key, and the
    # gateway's environ, memory and home are closed to the workers.
    code, out = sandbox.run_as_user(info, ["python3", "-c", PROCESS_SCRIPT])
    assert code == 0, out
    assert_unprivileged(out, RUN_UID, GATEWAY_UID, expect=frozenset())
    assert any(line.split()[2] == str(GATEWAY_UID) for line in out.splitlines()), out
    code, out = sandbox.run_as_user(info, ["python3", "-c", SNOOP, secret, GATEWAY_HOME])
    assert code == 0, out
    procs = [line.split()[1:] for line in out.splitlines() if line.startswith("proc ")]
    assert not [p for p in procs if p[2] == "leak"], procs
    gateway = [p for p in procs if p[1] == str(GATEWAY_UID)]
    assert gateway and all(p[2] == "denied" and p[3] == "denied" for p in gateway), procs
    assert "home denied" in out
    # model/ is the gateway's: workers read it, cannot write it.
    assert run.model_dir.stat().st_uid == GATEWAY_UID and run.model_dir.stat().st_mode & 0o777 == 0o755
    code, out = sandbox.run_as_user(info, ["sh", "-c", f"touch /orch/runs/{name}/model/forged 2>&1; echo $?"])
    assert "Permission denied" in out, out

    # Nowhere else: the container's configuration and log, the image, the run folder (recordings too).
    container = engine.containers.get(info.container.id)
    assert secret not in json.dumps(container.attrs)
    assert container.attrs["Config"]["OpenStdin"] and container.attrs["Config"]["StdinOnce"]
    assert secret not in json.dumps(engine.images.get(image).attrs)
    container.stop(timeout=15)  # its whole life's log, teardown included
    assert secret.encode() not in container.logs(stdout=True, stderr=True)
    assert orch("kill", name).exit_code == 0
    recordings = list(run.model_dir.glob("exchanges-*.jsonl.gz"))
    assert recordings, list(run.model_dir.iterdir())
    for path in run.root.rglob("*"):
        if path.is_file():
            data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
            assert secret.encode() not in data, path

    # After the run, the helper hands model/ back to the run's uid (orch kill does it for a non-root user).
    mounts.chown_in_helper(engine, image, name, run.model_dir, RUN_UID, RUN_UID)
    assert {p.stat().st_uid for p in [run.model_dir, *run.model_dir.rglob("*")]} == {RUN_UID}


def test_gateway_uid_must_differ_from_the_run_uid(
    image: str, names: list[str], workdir: Path, engine: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = new_name(names, "gwuid")
    monkeypatch.setenv(settings.GATEWAY_UID.name, str(RUN_UID))
    result = orch("up", name, "--agent", "scripted", "--workdir", workdir, "--offline")
    assert result.exit_code == 2 and "uid of its own" in result.output, result.output
    assert not RunFolder.for_name(name).root.exists()
    assert not engine.containers.list(all=True, filters={"name": f"orch-{name}"})

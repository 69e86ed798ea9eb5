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
import os
import secrets
import signal
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from docker.models.containers import Container

from orch import procs
from orch.backends.docker import mounts
from orch.backends.docker.image import build_image, image_is_current
from orch.backends.docker.sandbox import DockerSandbox
from orch.container.init import GATEWAY_HOME
from orch.errors import SandboxError, UsageError
from orch.offline.modelserver import ScriptedModelServer, key_digest
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import DockerRunInfo
from orch.settings import user
from orch.versions import CLAUDE_CODE_VERSION
from tests.dockertest import (
    BASE,
    BUILD_TIMEOUT,
    CA_BUNDLE,
    GATEWAY_UID,
    IMAGE,
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
        monkeypatch.setenv(user.DEFAULT_ALLOW.name, "")
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
    result = orch("up", name, "--isolation", "shared", "--agent", "scripted", "--workdir", workdir)
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
    monkeypatch.setenv(user.GATEWAY_UID.name, str(RUN_UID))
    result = orch("up", name, "--isolation", "shared", "--agent", "scripted", "--workdir", workdir, "--offline")
    assert result.exit_code == 2 and "uid of its own" in result.output, result.output
    assert not RunFolder.for_name(name).root.exists()
    assert not engine.containers.list(all=True, filters={"name": f"orch-{name}"}, ignore_removed=True)


@pytest.fixture
def mixed_image(engine: docker.DockerClient, monkeypatch: pytest.MonkeyPatch) -> str:
    """A worker image carrying Claude Code and Codex (ORCH_IMAGE with `-claude-codex` added to its tag),
    built from the current sources unless it already is."""
    tag = f"{IMAGE}-claude-codex" if ":" in IMAGE.rsplit("/", 1)[-1] else f"{IMAGE}:claude-codex"
    agents = ("claude", "codex")
    if not image_is_current(tag, BASE, CLAUDE_CODE_VERSION, agents):
        log: list[str] = []
        try:
            build_image(BASE, CLAUDE_CODE_VERSION, CA_BUNDLE, tag, log.append, agents)
        except (UsageError, SandboxError) as exc:
            pytest.fail(f"building {tag} failed: {exc.one_line()}\n" + "\n".join(log[-40:]))
    monkeypatch.setenv(user.IMAGE.name, tag)
    return tag


# Run as the run's uid: a token per kind minted with the control key, each kind's call through the
# gateway, then each kind's token on the other API's path, then each endpoint directly.
TWO_APIS = """
import json, sys, urllib.error, urllib.request
from orch.gateway.process import GatewayClient, handle_path, load_handle
handle = load_handle(handle_path(sys.argv[1]))
client = GatewayClient(handle)
tokens = {"claude": client.mint_token(7, "claude"), "codex": client.mint_token(8, "codex")}
messages = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
responses = json.dumps({"model": "gpt-5.5", "input": "hi", "stream": False})
def post(kind, path, body):
    req = urllib.request.Request(handle.url + "/t/" + tokens[kind] + path, data=body.encode(),
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code
print("claude messages", post("claude", "/v1/messages", messages))
print("codex responses", post("codex", "/responses", responses))
print("claude responses", post("claude", "/responses", responses))
print("codex messages", post("codex", "/v1/messages", messages))
for url in sys.argv[2:]:
    try:
        urllib.request.urlopen(url, timeout=5).read(); print("direct ok")
    except urllib.error.HTTPError:
        print("direct ok")
    except Exception as exc:
        print("direct blocked", type(exc).__name__)
"""


def test_a_live_fleet_across_two_model_apis_keeps_each_key_for_its_own_api(
    mixed_image: str, names: list[str], workdir: Path, engine: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`orch up --agents claude:1,codex:1` in a container, live: the host hands both keys to the init on
    stdin, the gateway (its own uid) holds both, each endpoint (the scripted model on the bridge, twice)
    gets only its own key and only from the gateway, a worker's token reaches only its kind's API, and
    neither key is anywhere a worker or `docker inspect` can read."""
    bridge = bridge_address(engine)
    keys = {"anthropic": f"sk-ant-test-{secrets.token_hex(16)}", "openai": f"sk-proj-test-{secrets.token_hex(16)}"}
    with ScriptedModelServer(host=bridge) as anthropic, ScriptedModelServer(host=bridge) as openai:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", anthropic.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", keys["anthropic"])
        monkeypatch.setenv("OPENAI_BASE_URL", openai.url)
        monkeypatch.setenv("OPENAI_API_KEY", keys["openai"])
        monkeypatch.setenv(user.DEFAULT_ALLOW.name, "")
        for var in ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"):
            monkeypatch.delenv(var, raising=False)
        name = new_name(names, "gw2")
        result = orch("up", name, "--isolation", "shared", "--agents", "claude:1,codex:1", "--workdir", workdir)
        assert result.exit_code == 0, result.output
        run = RunFolder.for_name(name)
        info = run.info()
        assert isinstance(info, DockerRunInfo) and info.credential == "x-api-key,bearer"
        code, out = DockerSandbox().run_as_user(
            info, ["python3", "-c", TWO_APIS, name, anthropic.url + "/", openai.url + "/"]
        )
        assert code == 0, out
        assert "claude messages 200" in out and "codex responses 200" in out, out
        assert "claude responses 403" in out and "codex messages 403" in out, out
        assert out.count("direct blocked") == 2, out
        # Each endpoint got its own key only (the Codex worker's boot turn included), in its own scheme.
        assert {(r.auth, r.key_digest) for r in anthropic.requests} == {("api-key", key_digest(keys["anthropic"]))}
        assert {(r.auth, r.key_digest) for r in openai.requests} == {("bearer", key_digest(keys["openai"]))}
        (report,) = [e["data"] for e in events(run) if e["event"] == Event.EGRESS]
        assert isinstance(report, dict) and set(report["gateway"]) == {bridge}
        # The boot self-test proved the run's uid refused at both model APIs, not only the first.
        probed = str(report["gateway_selftest"]).split("; ")
        assert [p.split()[:2] for p in probed] == [["blocked", f"{bridge}:{u.port}"] for u in (anthropic, openai)]
        code, out = DockerSandbox().run_as_user(info, ["python3", "-c", SNOOP, keys["openai"], GATEWAY_HOME])
        assert code == 0 and " leak " not in out and "home denied" in out, out
        container = engine.containers.get(info.container.id)
        assert not [k for k in keys.values() if k in json.dumps(container.attrs)]
        container.stop(timeout=15)
        logs = container.logs(stdout=True, stderr=True)
        assert not [k for k in keys.values() if k.encode() in logs]
        assert orch("kill", name).exit_code == 0
    refused = [e for e in map(json.loads, run.model_log.read_text().splitlines()) if e["event"] == "no-upstream"]
    assert [e["worker"] for e in refused] == [7, 8]
    for path in run.root.rglob("*"):
        if path.is_file():
            data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
            assert not [k for k in keys.values() if k.encode() in data], path


def test_a_fleet_across_model_apis_without_one_key_creates_no_container(
    mixed_image: str, names: list[str], workdir: Path, engine: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("OPENAI_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", f"sk-ant-test-{secrets.token_hex(8)}")
    name = new_name(names, "gwkey")
    result = orch("up", name, "--agents", "claude:1,codex:1", "--workdir", workdir)
    assert result.exit_code == 2 and "codex: OPENAI_API_KEY" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not RunFolder.for_name(name).root.exists()
    assert not engine.containers.list(all=True, filters={"name": f"orch-{name}"}, ignore_removed=True)


# Run as the run's uid: mint worker 7's token (`mint`), or (`call TOKEN`) wait for the gateway to answer and
# make one Messages call with that token, then have it settle (usage and recording written).
AGAIN = """
import json, sys, time, urllib.request
from orch.gateway.process import GatewayClient, handle_path, load_handle
from orch.waits import wait_until
client = GatewayClient(load_handle(handle_path(sys.argv[1])))
if sys.argv[2] == "mint":
    print("token", client.mint_token(7)); sys.exit()
wait_until(client.health, 60, "the gateway to answer")
body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
url = client.handle.url + "/t/" + sys.argv[3] + "/v1/messages"
req = urllib.request.Request(url, data=body.encode(), headers={"content-type": "application/json"})
with urllib.request.urlopen(req, timeout=20) as r:
    print("status", r.status)
client.settle()
"""


def _gateway_processes(container: Container) -> dict[int, tuple[int, list[str]]]:
    """The container's gateway processes (host pid: uid, argv), read on the engine's machine."""
    top = container.top()
    found = {}
    for row in top["Processes"]:
        pid = int(row[top["Titles"].index("PID")])
        argv, uid = procs.cmdline(pid), procs.uid(pid)
        if any(a.startswith("orch.gateway") for a in argv) and uid is not None:  # keeper, supervisor, server
            found[pid] = (uid, argv)
    return found


def test_a_killed_gateway_comes_back_as_its_uid_and_records_the_next_call(
    image: str, names: list[str], workdir: Path, engine: docker.DockerClient
) -> None:
    """The gateway's supervisor SIGKILLed (as the OOM killer would): its keeper starts it again as the
    gateway's uid, a worker restart meanwhile waits for it instead of starting one as the run's uid, and
    the next call with the token of before is answered, recorded and counted in `model/`."""
    name = new_name(names, "gk")
    result = orch("up", name, "--isolation", "shared", "--agent", "scripted", "--offline", "--workdir", workdir)
    assert result.exit_code == 0, result.output
    run = RunFolder.for_name(name)
    info = run.info()
    assert isinstance(info, DockerRunInfo)
    sandbox = DockerSandbox()
    code, out = sandbox.run_as_user(info, ["python3", "-c", AGAIN, name, "mint"])
    assert code == 0 and out.startswith("token "), out
    token = out.split()[1]
    code, out = sandbox.run_as_user(info, ["python3", "-c", AGAIN, name, "call", token])
    assert code == 0 and "status 200" in out, out

    container = engine.containers.get(info.container.id)
    before = _gateway_processes(container)
    gateways = [pid for pid, (_, argv) in before.items() if argv[1:3] == ["-m", "orch.gateway"]]
    forked = {child for pid in gateways for child in procs.children(pid)}  # its server child: a fork, same argv
    (supervisor,) = [pid for pid in gateways if pid not in forked]
    assert before[supervisor][0] == GATEWAY_UID
    os.kill(supervisor, signal.SIGKILL)
    assert orch("restart", name, "1").exit_code == 0  # its `ensure` waits for the gateway, starts none
    code, out = sandbox.run_as_user(info, ["python3", "-c", AGAIN, name, "call", token])
    assert code == 0 and "status 200" in out, out

    after = _gateway_processes(container)
    assert supervisor not in after and after, after
    assert {uid for uid, _ in after.values()} == {GATEWAY_UID}, after  # none of the run's uid
    usage = json.loads(run.model_usage.read_text())
    assert usage["workers"]["7"]["requests"] == 2, usage
    lines = [json.loads(line) for line in run.model_log.read_text().splitlines()]
    assert [e for e in lines if e["event"] == "started" and e["data"].get("resumed")], lines
    assert {p.stat().st_uid for p in [run.model_dir, *run.model_dir.rglob("*")]} == {GATEWAY_UID}
    assert orch("kill", name).exit_code == 0

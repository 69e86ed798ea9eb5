"""A local fleet's model traffic goes through its gateway, with the real Claude Code binary: the workers
hold run-scoped tokens, never the user's credential, and the upstream gets the credential from the
gateway alone."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from orch.backends.registry import confinement_of
from orch.fleet import launch, rungateway
from orch.gateway.process import GatewayClient, handle_path, load_handle
from orch.offline.modelserver import ScriptedModelServer, key_digest
from orch.run.folder import RunFolder
from orch.waits import wait_until
from tests.helpers import orch, orch_script, user_endpoint

pytestmark = pytest.mark.claude
SECRET = "sk-ant-api03-orch-test-SECRET-d41d8cd98f00b204e9800998ecf8427e"


@pytest.fixture
def upstream(monkeypatch: pytest.MonkeyPatch, claude_bin: Path) -> Iterator[ScriptedModelServer]:
    """The user's endpoint (their own proxy, say): a scripted model that records whose key came."""
    with ScriptedModelServer() as server:
        user_endpoint(monkeypatch, "claude", server.url, SECRET, claude_bin, clear=["CLAUDE_CONFIG_DIR"])
        yield server


def _brief(run: RunFolder, n: int) -> str:
    steps = [{"bash": f"env > {run.outbox(n)}/env.txt"}, {"bash": f"touch {run.done(n)}"}, {"reply": "Finished."}]
    return "Dump the environment.\n\n" + orch_script(*steps)


def _post(url: str, headers: dict[str, str]) -> int:
    body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
    request = urllib.request.Request(url, data=body.encode(), headers={"content-type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_workers_hold_tokens_and_only_the_gateway_holds_the_key(upstream: ScriptedModelServer, tmp_path: Path) -> None:
    workdir = tmp_path / "w"
    workdir.mkdir()
    assert orch("up", "gw", "-n", "2", "--workdir", workdir, "--local").exit_code == 0
    run = RunFolder.for_name("gw")
    for n in (1, 2):
        brief = tmp_path / f"brief-{n}.md"
        brief.write_text(_brief(run, n))
        assert orch("brief", "gw", str(n), brief).exit_code == 0
    wait_until(lambda: all(run.done(n).exists() for n in (1, 2)), 90, "both workers to finish", watch=run.root)

    # What the workers' own commands saw: a gateway URL with a token, the token as key, no secret.
    handle = load_handle(handle_path("gw"))
    tokens = {}
    for n in (1, 2):
        env = dict(line.split("=", 1) for line in (run.outbox(n) / "env.txt").read_text().splitlines() if "=" in line)
        assert SECRET not in (run.outbox(n) / "env.txt").read_text()
        assert env["ANTHROPIC_BASE_URL"].startswith(f"{handle.url}/t/")
        tokens[n] = env["ANTHROPIC_API_KEY"]
        assert env["ANTHROPIC_BASE_URL"].endswith(tokens[n])
    assert tokens[1] != tokens[2]
    # Every process of the fleet (agents, hooks, tool calls) and the tmux server: no secret.
    for pid in launch.worker_processes(run, 2, confinement_of(run.info())):
        with contextlib.suppress(ProcessLookupError, FileNotFoundError):  # a hook that exited meanwhile
            assert SECRET.encode() not in Path(f"/proc/{pid}/environ").read_bytes()
    tmux_env = subprocess.run(
        ["tmux", "-L", run.info().tmux_socket, "show-environment", "-g"], capture_output=True, text=True, check=True
    ).stdout
    assert SECRET not in tmux_env and "ANTHROPIC_API_KEY" not in tmux_env
    # The run folder and its logs, the config dirs: no secret anywhere.
    for root in (run.root, run.config_root):
        for path in root.rglob("*"):
            if path.is_file():
                assert SECRET.encode() not in path.read_bytes(), path
    # The upstream got the real key, from the gateway, for every call.
    calls = [r for r in upstream.requests if r.path == "/v1/messages"]
    assert calls and {(r.auth, r.key_digest) for r in calls} == {("api-key", key_digest(SECRET))}

    # A made-up token, a token without its path, the real key itself: refused by the gateway.
    assert _post(f"{handle.url}/t/orch-gw-w1-{'0' * 32}/v1/messages", {"x-api-key": tokens[1]}) == 401
    assert _post(f"{handle.url}/v1/messages", {"x-api-key": SECRET}) == 401
    assert _post(f"{handle.url}/t/{tokens[1]}/v1/messages", {}) == 200
    # A restart gives the worker a new token and revokes its old one.
    launch.restart(run, 1, confinement_of(run.info()))
    assert _post(f"{handle.url}/t/{tokens[1]}/v1/messages", {}) == 401
    # After the run the gateway is gone with every token.
    assert orch("kill", "gw").exit_code == 0
    assert not handle_path("gw").exists()
    with pytest.raises(OSError):
        _post(f"{handle.url}/t/{tokens[2]}/v1/messages", {})


def test_a_killed_gateway_server_is_restarted_and_the_worker_carries_on(
    upstream: ScriptedModelServer, tmp_path: Path
) -> None:
    """SIGKILL the gateway's server child under a live fleet: its supervisor starts another on the same
    socket with the same tokens, the worker's next turns go through it, and nothing is counted twice."""
    workdir = tmp_path / "w"
    workdir.mkdir()
    assert orch("up", "gk", "--workdir", workdir, "--local").exit_code == 0
    run = RunFolder.for_name("gk")
    handle = load_handle(handle_path("gk"))
    child = GatewayClient(handle).info()["pid"]
    os.kill(child, signal.SIGKILL)
    wait_until(
        lambda: GatewayClient(handle).health() and GatewayClient(handle).info()["pid"] != child,
        30,
        "the gateway's supervisor to start a new server child",
    )
    brief = tmp_path / "brief.md"
    brief.write_text(_brief(run, 1))
    assert orch("brief", "gk", "1", brief).exit_code == 0
    wait_until(lambda: run.done(1).exists(), 90, "the worker to finish through the new server", watch=run.root)
    GatewayClient(handle).settle()  # the last answer's books are written just after it
    lives = [json.loads(line) for line in run.model_log.read_text().splitlines()]
    assert [e["data"].get("restart", False) for e in lives if e["event"] == "started"][-1]
    ids = [(e["kind"], e["id"]) for e in map(json.loads, run.model_ledger.read_text().splitlines())]
    assert ids and len(ids) == len(set(ids))
    usage = json.loads(run.model_usage.read_text())
    # Counted once each: never more requests than the upstream answered.
    assert 0 < usage["workers"]["1"]["requests"] <= len([r for r in upstream.requests if r.path == "/v1/messages"])


def test_a_killed_gateway_supervisor_is_started_again_and_the_workers_keep_their_tokens(
    upstream: ScriptedModelServer, tmp_path: Path
) -> None:
    """SIGKILL the gateway's supervisor under a live fleet: its server child and its address go with it.
    `ensure` (what the controller calls) starts another gateway that takes back the address and the
    workers' tokens from its private state, so the worker, never restarted, finishes its brief through it
    and nothing is counted twice."""
    workdir = tmp_path / "w"
    workdir.mkdir()
    assert orch("up", "gs", "--workdir", workdir, "--local").exit_code == 0
    run = RunFolder.for_name("gs")
    info = run.info()
    old = load_handle(handle_path("gs"))
    state = handle_path("gs").with_name("gs.json.tokens")
    assert stat.S_IMODE(state.stat().st_mode) == 0o600 and not str(state).startswith(str(run.root))
    pids_before = {n: p.pid for n, p in launch.server_for(info).panes().items()}
    os.kill(old.pid, signal.SIGKILL)
    wait_until(lambda: not GatewayClient(old).health(), 30, "the killed gateway to stop answering")
    assert rungateway.lost(info) is not None
    new = rungateway.ensure(run, info)
    assert new.pid != old.pid and new.url == old.url  # the same address: the workers' base URLs still work
    assert rungateway.lost(info) is None
    brief = tmp_path / "brief.md"
    brief.write_text(_brief(run, 1))
    assert orch("brief", "gs", "1", brief).exit_code == 0
    wait_until(lambda: run.done(1).exists(), 90, "the worker to finish through the new gateway", watch=run.root)
    assert {n: p.pid for n, p in launch.server_for(info).panes().items()} == pids_before  # none restarted
    GatewayClient(new).settle()
    lives = [json.loads(line) for line in run.model_log.read_text().splitlines()]
    resumed = [e for e in lives if e["event"] == "started" and e["data"].get("resumed")]
    assert len(resumed) == 1 and resumed[0]["data"]["tokens"] >= 1
    assert not [e for e in lives if e["event"] == "bad-token"]  # the worker's old token was honoured
    ids = [(e["kind"], e["id"]) for e in map(json.loads, run.model_ledger.read_text().splitlines())]
    assert ids and len(ids) == len(set(ids))
    usage = json.loads(run.model_usage.read_text())
    assert 0 < usage["workers"]["1"]["requests"] <= len([r for r in upstream.requests if r.path == "/v1/messages"])
    started = [e for e in map(json.loads, run.events.read_text().splitlines()) if e["event"] == "gateway-started"]
    assert started[-1]["data"]["replaces"] == old.pid
    assert orch("kill", "gs").exit_code == 0
    assert not state.exists()  # the run is over: nothing left to resume


def test_a_running_gateway_must_serve_the_kind_of_run_it_finds(tmp_path: Path) -> None:
    """A gateway started by someone else (compose's init, from ORCH_OFFLINE) that serves the scripted model
    is refused to a live run, so a run never bills or fakes what its spec did not ask for."""
    from orch.errors import UsageError
    from tests.helpers import run_info

    run = RunFolder.for_name("gwkind")
    info = run_info("gwkind", workdir=str(tmp_path))
    info.offline = True
    run.create(info)
    try:
        handle = rungateway.ensure(run, info)
        assert GatewayClient(handle).info()["offline"] is True
        info.offline = False
        with pytest.raises(UsageError, match="serves the scripted model, but this is a live run"):
            rungateway.ensure(run, info)
        info.offline = True
        assert rungateway.ensure(run, info) == handle
    finally:
        rungateway.stop("gwkind")

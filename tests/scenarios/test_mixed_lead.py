"""Fleets of different agents: cross-kind verification end to end (Claude Code and Codex CLI, offline),
and a live fleet across two model APIs through one gateway of two upstreams."""

from __future__ import annotations

import contextlib
import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from orch.agents.codex.adapter import OFFLINE_MODEL
from orch.backends.local.sandbox import LocalSandbox
from orch.backends.registry import confinement_of
from orch.contracts import UpRequest
from orch.fleet import launch
from orch.gateway.process import GatewayClient, handle_path, load_handle
from orch.offline.modelserver import ScriptedModelServer, key_digest
from orch.run.folder import RunFolder
from orch.waits import wait_until
from tests.helpers import orch, user_endpoint

pytestmark = [pytest.mark.claude, pytest.mark.codex]


@pytest.fixture
def agents(claude_bin: Path, codex_bin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_CLAUDE_BIN", str(claude_bin))
    monkeypatch.setenv("ORCH_CODEX_BIN", str(codex_bin))


ANTHROPIC_KEY = "sk-ant-api03-orch-test-MIXED-ANTHROPIC-5e4d3c2b1a09f8e7d6c5b4a3"
OPENAI_KEY = "sk-proj-orch-test-MIXED-OPENAI-9f8e7d6c5b4a3e2d1c0b9a8f7e6d"


@pytest.fixture
def upstreams(
    agents: None, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[ScriptedModelServer, ScriptedModelServer]]:
    """The user's two model APIs: orch's scripted model twice on loopback, each with its own fake key."""
    with ScriptedModelServer() as anthropic, ScriptedModelServer() as openai:
        user_endpoint(monkeypatch, "claude", anthropic.url, ANTHROPIC_KEY, clear=["CLAUDE_CONFIG_DIR"])
        user_endpoint(monkeypatch, "codex", openai.url, OPENAI_KEY)
        yield anthropic, openai


def _environ(pid: int | None) -> dict[str, str]:
    assert pid is not None
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


def test_a_live_fleet_across_model_apis_needs_each_credential(
    upstreams: tuple[ScriptedModelServer, ScriptedModelServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    result = orch("up", "live", "--local", "--agents", "claude:1,codex:1", "--workdir", tmp_path)
    assert result.exit_code == 2, result.output
    assert "codex: OPENAI_API_KEY" in result.output and len(result.output.strip().splitlines()) == 1
    assert not RunFolder.for_name("live").root.exists() and not handle_path("live").exists()


def test_a_live_fleet_across_model_apis_gives_each_upstream_its_own_key(
    upstreams: tuple[ScriptedModelServer, ScriptedModelServer], tmp_path: Path
) -> None:
    """Claude Code and Codex, live (not --offline) through one gateway of two upstreams: each upstream gets
    its own key and nothing else, no worker holds a key, the books count both, and a worker's token
    reaches only its own model API."""
    anthropic, openai = upstreams
    workdir = tmp_path / "w"
    workdir.mkdir()
    # `orch up live --local --agents claude:1,codex:1`, with the Codex worker on the model whose tools the
    # scripted model scripts (Codex's default model uses freeform tools).
    request = UpRequest("live", 2, "claude", workdir, worker_agents={2: "codex"}, worker_models={2: OFFLINE_MODEL})
    LocalSandbox().up(request)
    run = RunFolder.for_name("live")
    assert run.info().credential == "x-api-key,bearer"
    for n in (1, 2):
        steps = [{"bash": f"touch {run.done(n)}"}, {"reply": "Finished."}]
        brief = tmp_path / f"brief-{n}.md"
        brief.write_text("Finish.\n\n```orch-script\n" + "\n".join(json.dumps(s) for s in steps) + "\n```\n")
        assert orch("brief", "live", str(n), brief).exit_code == 0
    wait_until(lambda: run.done(1).exists() and run.done(2).exists(), 120, "both workers to finish", watch=run.root)

    # Each upstream saw its own key only, on its own protocol's calls.
    assert {r.key_digest for r in anthropic.requests} == {key_digest(ANTHROPIC_KEY)}
    assert "/v1/messages" in {r.path for r in anthropic.requests}
    assert {r.key_digest for r in openai.requests} == {key_digest(OPENAI_KEY)}
    assert {r.path for r in openai.requests} == {"/responses"}

    # No worker holds a key: not the agents' environments, the tmux server's, the config dirs, the run folder.
    info = run.info()
    panes = launch.server_for(info).panes()
    environs = {n: _environ(launch.agent_pid(panes[n])) for n in (1, 2)}
    handle = load_handle(handle_path("live"))
    assert environs[1]["ANTHROPIC_BASE_URL"].startswith(f"{handle.url}/t/") and "OPENAI_API_KEY" not in environs[1]
    assert environs[2]["OPENAI_BASE_URL"].startswith(f"{handle.url}/t/") and "ANTHROPIC_API_KEY" not in environs[2]
    for pid in launch.worker_processes(run, 2, confinement_of(run.info())):
        with contextlib.suppress(ProcessLookupError, FileNotFoundError):
            data = Path(f"/proc/{pid}/environ").read_bytes()
            assert ANTHROPIC_KEY.encode() not in data and OPENAI_KEY.encode() not in data
    tmux_env = subprocess.run(
        ["tmux", "-L", info.tmux_socket, "show-environment", "-g"], capture_output=True, text=True, check=True
    ).stdout
    assert not {"ANTHROPIC_API_KEY", "OPENAI_API_KEY", ANTHROPIC_KEY, OPENAI_KEY} & set(
        tmux_env.replace("=", "\n").split()
    )
    for root in (run.root, run.config_root):
        for path in root.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                assert ANTHROPIC_KEY.encode() not in data and OPENAI_KEY.encode() not in data, path

    # The books count both workers, each under its own model.
    GatewayClient(handle).settle()
    usage = json.loads(run.model_usage.read_text())
    assert usage["billed"] and usage["workers"]["1"]["requests"] > 0 and usage["workers"]["2"]["requests"] > 0
    assert all(m.startswith("claude") for m in usage["workers"]["1"]["by_model"])
    assert all(m.startswith("gpt") for m in usage["workers"]["2"]["by_model"])

    # Hostile: the Claude Code worker's token on the Responses path, the Codex worker's on the Messages path.
    claude_token, codex_token = environs[1]["ANTHROPIC_API_KEY"], environs[2]["OPENAI_API_KEY"]
    seen = len(anthropic.requests), len(openai.requests)
    body = {"model": "gpt-5.5", "input": "hi", "stream": False}
    wrong = _post(f"{handle.url}/t/{claude_token}/responses", body, {"authorization": f"Bearer {claude_token}"})
    assert wrong[0] == 403 and "no upstream of this run serves the openai-responses API" in wrong[1]
    body = {"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    assert _post(f"{handle.url}/t/{codex_token}/v1/messages", body, {"x-api-key": codex_token})[0] == 403
    assert (len(anthropic.requests), len(openai.requests)) == seen
    refused = [json.loads(line) for line in run.model_log.read_text().splitlines()]
    assert [e["worker"] for e in refused if e["event"] == "no-upstream"] == [1, 2]
    assert orch("kill", "live").exit_code == 0


def _post(url: str, body: object, headers: dict[str, str]) -> tuple[int, str]:
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"content-type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()

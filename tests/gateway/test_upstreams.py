"""A gateway of several upstreams, one per model API of a mixed fleet: each upstream is one of orch's
scripted model servers on loopback with its own fake key. A worker's token is bound to its agent kind, so
its calls reach its own upstream with that upstream's key only; a call to another model API's path is
refused (no-upstream), never forwarded; the books count both protocols; a recording of the mixed run
replays."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from orch.errors import OrchError
from orch.gateway.credential import fleet_upstreams
from orch.gateway.modeldir import GatewayBudget, Upstream
from orch.gateway.process import GatewayClient, start_gateway
from orch.gateway.recording.exchanges import read_exchanges
from orch.offline.modelserver import ScriptedModelServer, key_digest
from orch.waits import wait_until
from tests.gateway.apis.test_openai_responses import _responses_call
from tests.gateway.gw import boot_for, call, events_of, gateway, main_call, settled, usage_of
from tests.gateway.test_credential import ANTHROPIC_KEY, CLAUDE, CODEX, OPENAI_KEY

SCRIPT = '```orch-script\n{"bash": "echo hi"}\n{"reply": "Finished."}\n```'


@pytest.fixture
def servers() -> Iterator[tuple[ScriptedModelServer, ScriptedModelServer]]:
    with ScriptedModelServer() as anthropic, ScriptedModelServer() as openai:
        yield anthropic, openai


def _upstreams(anthropic: ScriptedModelServer, openai: ScriptedModelServer) -> list[Upstream]:
    env = {
        "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
        "ANTHROPIC_BASE_URL": anthropic.url,
        "OPENAI_API_KEY": OPENAI_KEY,
        "OPENAI_BASE_URL": openai.url,
    }
    return list(fleet_upstreams({"claude": CLAUDE, "codex": CODEX}, env, offline=False).upstreams)


def test_each_worker_reaches_its_own_upstream_with_its_key_only(
    servers: tuple[ScriptedModelServer, ScriptedModelServer], tmp_path: Path
) -> None:
    anthropic, openai = servers
    boot = boot_for(tmp_path / "run", None).model_copy(update={"upstreams": _upstreams(*servers), "offline": False})
    with gateway(tmp_path, boot) as gw:
        claude, codex = gw.client.mint_token(1, "claude"), gw.client.mint_token(2, "codex")
        assert call(gw.base(claude) + "/v1/messages", main_call(SCRIPT)).status == 200
        assert call(gw.base(codex) + "/responses", _responses_call(SCRIPT)).status == 200
        # Each upstream saw only its own key, in its own scheme.
        assert {(r.path, r.auth, r.key_digest) for r in anthropic.requests} == {
            ("/v1/messages", "api-key", key_digest(ANTHROPIC_KEY))
        }
        assert {(r.path, r.auth, r.key_digest) for r in openai.requests} == {
            ("/responses", "bearer", key_digest(OPENAI_KEY))
        }

        # A worker calling another model API's path with its own token: refused, counted, never forwarded.
        # Even with that API's own auth header (which is dropped anyway: the gateway sets the credential).
        wrong = call(gw.base(claude) + "/responses", _responses_call(SCRIPT), headers={"authorization": "Bearer x"})
        assert wrong.status == 403 and wrong.json()["error"]["code"] == "insufficient_permissions"
        assert "no upstream of this run serves the openai-responses API for a claude worker" in wrong.body.decode()
        other = call(gw.base(codex) + "/v1/messages", main_call(SCRIPT))
        assert other.status == 403 and other.json()["error"]["type"] == "permission_error"
        gemini = call(gw.base(codex) + "/v1beta/models/gemini-2.5-pro:generateContent", {"contents": []})
        assert gemini.status == 403 and gemini.json()["error"]["status"] == "PERMISSION_DENIED"
        assert len(anthropic.requests) == 1 and len(openai.requests) == 1
        refusals = [e for e in events_of(gw.folder) if e["event"] == "no-upstream"]
        assert [(e["worker"], e["data"]["agent"], e["data"]["protocol"]) for e in refusals] == [
            (1, "claude", "openai-responses"),
            (2, "codex", "anthropic"),
            (2, "codex", "gemini"),
        ]
        # A path no protocol claims goes to the worker's own upstream (its key, its scheme).
        assert call(gw.base(codex) + "/models", method="GET").status == 404  # the scripted model has none
        assert (openai.requests[-1].path, openai.requests[-1].key_digest) == ("/models", key_digest(OPENAI_KEY))
        assert len(anthropic.requests) == 1
        # Tokens: a gateway of several upstreams binds each to a kind it serves.
        for bad in ({}, {"agent": "gemini"}, {"agent": 3}):
            with pytest.raises(OrchError, match="HTTP 400"):
                gw.client._call("POST", "/_orch/tokens/3", bad or None)

        # The books count both protocols, per worker and model; the budget holds for both.
        usage = usage_of(settled(gw))
        assert usage["workers"]["1"]["requests"] == 1 and usage["workers"]["2"]["requests"] == 1
        assert set(usage["workers"]["1"]["by_model"]) == {"claude-sonnet-4-5-20250929"}
        assert set(usage["workers"]["2"]["by_model"]) == {"gpt-5.5"}
        assert usage["billed"] and usage["total"]["cost_usd"] > 0
        gw.client.set_budget(GatewayBudget(max_tokens_per_worker=1))
        assert call(gw.base(codex) + "/responses", _responses_call(SCRIPT)).status == 400
        assert len(openai.requests) == 2

        # A restarted server child keeps each token's kind (its supervisor hands them down).
        child = gw.client.info()["pid"]
        os.kill(child, signal.SIGKILL)
        wait_until(lambda: gw.client.health() and gw.client.info()["pid"] != child, 30, "a new gateway server child")
        assert call(gw.base(claude) + "/responses", _responses_call(SCRIPT)).status == 403
        # So does a gateway started again after its supervisor died (its private state keeps them).
        os.kill(gw.handle.pid, signal.SIGKILL)
        wait_until(lambda: not gw.client.health(), 30, "the killed gateway to stop answering")
        again = start_gateway(boot, gw.handle_file, gw.log)
        assert again.url == gw.handle.url
        assert call(gw.base(claude) + "/responses", _responses_call(SCRIPT)).status == 403
        assert call(gw.base(codex) + "/v1/messages", main_call(SCRIPT)).status == 403
        GatewayClient(again).set_budget(GatewayBudget())
        assert call(gw.base(codex) + "/responses", _responses_call(SCRIPT)).status == 200
        assert {r.key_digest for r in openai.requests} == {key_digest(OPENAI_KEY)} and len(openai.requests) == 3
    # No key in the run folder: not in the recordings, the books, the events or the log.
    for path in gw.folder.root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert ANTHROPIC_KEY.encode() not in data and OPENAI_KEY.encode() not in data, path
    log = (tmp_path / "gateway.log").read_bytes()
    assert ANTHROPIC_KEY.encode() not in log and OPENAI_KEY.encode() not in log


def test_a_recorded_mixed_run_replays(servers: tuple[ScriptedModelServer, ScriptedModelServer], tmp_path: Path) -> None:
    live = tmp_path / "live"
    live.mkdir()
    boot = boot_for(live / "run", None).model_copy(update={"upstreams": _upstreams(*servers), "offline": False})
    with gateway(live, boot) as gw:
        claude, codex = gw.client.mint_token(1, "claude"), gw.client.mint_token(2, "codex")
        first = call(gw.base(claude) + "/v1/messages", main_call(SCRIPT, stream=False))
        second = call(gw.base(codex) + "/responses", _responses_call(SCRIPT))
        folder = settled(gw)
        assert [e.path for e in read_exchanges(folder.exchanges(1))] == ["/v1/messages"]
        assert [e.path for e in read_exchanges(folder.exchanges(2))] == ["/responses"]
    replayed = tmp_path / "replayed"
    (replayed / "run").mkdir(parents=True)
    with gateway(replayed, boot_for(replayed / "run", None, replay=str(live / "run"))) as rp:
        claude, codex = rp.client.mint_token(1, "claude"), rp.client.mint_token(2, "codex")
        again = call(rp.base(claude) + "/v1/messages", main_call(SCRIPT, stream=False))
        assert again.status == 200 and again.json() == first.json()
        answer = call(rp.base(codex) + "/responses", _responses_call(SCRIPT))
        assert answer.status == 200 and answer.body == second.body
        usage = usage_of(settled(rp))
        assert not usage["billed"] and {usage["workers"][w]["requests"] for w in ("1", "2")} == {1}

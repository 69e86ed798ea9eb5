"""The real Claude Code binary in print mode, through the gateway to the scripted model."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from orch.gateway.modeldir import GatewayBudget
from tests.gateway.gw import Running, events_of, gateway, ledger_of, script_prompt, settled, usage_of

pytestmark = pytest.mark.claude


def _claude(claude_bin: Path, tmp: Path, gw: Running, token: str, prompt: str, n: int) -> tuple[dict[str, Any], float]:
    """Run one `claude -p` turn as worker n, its config dir seeded as orch/agents/claude.py seeds it."""
    work, cfg = tmp / "work", tmp / f"cfg-{n}"
    work.mkdir(exist_ok=True)
    cfg.mkdir()
    seed = {
        "hasCompletedOnboarding": True,
        "hasSeenAutoDefaultNudge": True,
        "projects": {str(work): {"hasTrustDialogAccepted": True}},
        "customApiKeyResponses": {"approved": [token[-20:]], "rejected": []},
    }
    (cfg / ".claude.json").write_text(json.dumps(seed))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_"))}
    env |= {
        "CLAUDE_CONFIG_DIR": str(cfg),
        "ANTHROPIC_BASE_URL": gw.base(token),
        "ANTHROPIC_API_KEY": token,
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    started = time.monotonic()
    done = subprocess.run(
        [str(claude_bin), "-p", prompt, "--output-format", "json", "--allowedTools", "Bash"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result, time.monotonic() - started


def test_claude_code_turns_budget_refusal_and_bad_token(
    claude_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCH_LOG_LEVEL", "INFO")  # the gateway logs each refusal: we count Claude Code's tries
    with gateway(tmp_path) as gw:
        token = gw.client.mint_token(1)
        out = tmp_path / "work" / "out.txt"
        prompt = script_prompt({"bash": f"echo gateway-ok > {out}"}, {"reply": "Finished."})
        result, _ = _claude(claude_bin, tmp_path, gw, token, prompt, 1)
        assert result["result"] == "Finished." and not result["is_error"], result
        assert out.read_text() == "gateway-ok\n"
        worker = usage_of(settled(gw))["workers"]["1"]
        assert worker["requests"] >= 2 and worker["input_tokens"] == result["usage"]["input_tokens"]
        assert worker["output_tokens"] == result["usage"]["output_tokens"]
        if worker["cost_usd"]:  # the model Claude Code picked is in the table: same price as its own
            assert worker["cost_usd"] == pytest.approx(result["total_cost_usd"], rel=1e-6)
        ledger = ledger_of(settled(gw))
        assert [(e["kind"], e.get("tool")) for e in ledger] == [("tool_use", "Bash"), ("tool_result", None)]

        # A budget refusal: an API error, no retry loop.
        refused = gw.client.mint_token(2)
        gw.client.set_budget(GatewayBudget(max_tokens_per_worker=0))
        result, took = _claude(claude_bin, tmp_path, gw, refused, "hello", 2)
        assert result["is_error"] and result["api_error_status"] == 400, result
        assert result["result"].startswith("API Error: 400 orch gateway: budget exceeded: worker 2"), result
        assert took < 60
        # 2.1.332 tries a refused main turn 6 times within about a second, then stops (module docstring).
        tries = gw.log.read_text().count("refused worker 2:")
        assert 1 <= tries <= 10, f"Claude Code retried a budget refusal {tries} times"

        # A bad token: authentication failed, at once.
        result, took = _claude(claude_bin, tmp_path, gw, "orch-gwtest-w3-" + "0" * 32, "hello", 3)
        assert result["is_error"] and result["api_error_status"] == 401, result
        assert "unknown worker token" in result["result"] and took < 60
        assert [e["event"] for e in events_of(gw.folder)].count("bad-token") == 1

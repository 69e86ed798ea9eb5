"""The real Gemini CLI binary in headless mode (`-p`), through the gateway to the scripted model."""

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

pytestmark = pytest.mark.gemini
MODEL = "gemini-2.5-pro"  # named, so Gemini CLI asks no router first: one main call per step


def _gemini(gemini_bin: Path, tmp: Path, gw: Running, token: str, prompt: str, n: int) -> tuple[dict[str, Any], float]:
    """One `gemini -p` turn as worker n, its GEMINI_CLI_HOME seeded with the auth choice orch seeds."""
    work, home = tmp / "work", tmp / f"home-{n}"
    work.mkdir(exist_ok=True)
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(
        json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEMINI_", "GOOGLE_"))}
    env |= {
        "GEMINI_CLI_HOME": str(home),
        "GEMINI_CLI_NO_RELAUNCH": "1",
        "GOOGLE_GEMINI_BASE_URL": gw.base(token),
        "GEMINI_API_KEY": token,
    }
    argv = [str(gemini_bin), "-p", prompt, "-o", "json", "-m", MODEL, "--skip-trust", "--approval-mode", "yolo"]
    started = time.monotonic()
    done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=240, check=False)
    start = done.stdout.find("{")
    result: dict[str, Any] = json.loads(done.stdout[start:]) if start >= 0 else {"stderr": done.stderr[-2000:]}
    result["exit"] = done.returncode
    return result, time.monotonic() - started


def test_gemini_cli_turns_budget_refusal_and_bad_token(
    gemini_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCH_LOG_LEVEL", "INFO")  # the gateway logs each refusal: we count Gemini CLI's tries
    with gateway(tmp_path) as gw:
        token = gw.client.mint_token(1)
        out = tmp_path / "work" / "out.txt"
        prompt = script_prompt({"bash": f"echo gateway-ok > {out}"}, {"reply": "Finished."})
        result, _ = _gemini(gemini_bin, tmp_path, gw, token, prompt, 1)
        assert result.get("response") == "Finished." and result["exit"] == 0, result
        assert out.read_text() == "gateway-ok\n"
        # The gateway counted what Gemini CLI counted itself.
        worker = usage_of(settled(gw))["workers"]["1"]
        tokens = result["stats"]["models"][MODEL]["tokens"]
        assert worker["requests"] == result["stats"]["models"][MODEL]["api"]["totalRequests"] == 2
        assert worker["input_tokens"] == tokens["prompt"] and worker["output_tokens"] == tokens["candidates"]
        assert worker["cost_usd"] == pytest.approx((tokens["prompt"] * 1.25 + tokens["candidates"] * 10) / 1e6)
        ledger = ledger_of(settled(gw))
        assert [(e["kind"], e.get("tool")) for e in ledger] == [
            ("tool_use", "run_shell_command"),
            ("tool_result", None),
        ]
        assert ledger[0]["id"] == ledger[1]["id"]  # the call and its result are paired

        # A budget refusal: an API error, and Gemini CLI stops (0.61.0: one try, exit 144).
        refused = gw.client.mint_token(2)
        gw.client.set_budget(GatewayBudget(max_tokens_per_worker=0))
        result, took = _gemini(gemini_bin, tmp_path, gw, refused, "hello", 2)
        assert result["exit"] != 0, result
        tries = gw.log.read_text().count("refused worker 2:")
        assert 1 <= tries <= 10 and took < 90, f"Gemini CLI retried a budget refusal {tries} times in {took:.0f}s"

        # A bad token: refused at once (exit 145), and the gateway says so.
        result, took = _gemini(gemini_bin, tmp_path, gw, "orch-gwtest-w3-" + "0" * 32, "hello", 3)
        assert result["exit"] != 0 and took < 90, result
        assert [e["event"] for e in events_of(gw.folder)].count("bad-token") >= 1

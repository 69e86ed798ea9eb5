"""A real gateway on a real scripted upstream: usage and cost, budgets, the ledger, the recording,
restarts of the server child, and replay from the recording."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from orch.gateway.modeldir import GatewayBudget, Tokens, UsageSnapshot
from orch.gateway.pricing import load_pricing
from orch.gateway.recording.exchanges import read_exchanges
from orch.waits import wait_until
from tests.gateway.gw import (
    Running,
    boot_for,
    call,
    events_of,
    gateway,
    health,
    ledger_of,
    main_call,
    script_prompt,
    settled,
    usage_of,
)

SCRIPT = script_prompt({"bash": "echo hi"}, {"reply": "Finished."})


def _turns(run: Running, token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A two-turn conversation: the model asks for Bash, the worker answers with its result."""
    first = main_call(SCRIPT)
    reply = call(run.base(token) + "/v1/messages", first)
    assert reply.status == 200, reply.body
    start = reply.events()[1]["content_block"]
    assert start["type"] == "tool_use"
    second = main_call(SCRIPT)
    second["messages"] += [
        {"role": "assistant", "content": [{**start, "input": {"command": "echo hi"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": start["id"], "content": "hi\n"}]},
    ]
    assert call(run.base(token) + "/v1/messages", second).status == 200
    return first, second


def _usage_from(events: list[dict[str, Any]]) -> Tokens:
    start = events[0]["message"]["usage"]
    return Tokens(**{**start, "output_tokens": events[-2]["usage"]["output_tokens"]})


def test_usage_cost_jobs_ledger_and_recording(tmp_path: Path) -> None:
    with gateway(tmp_path) as gw:
        token = gw.client.mint_token(1)
        reply = call(gw.base(token) + "/v1/messages", main_call("count me"))
        expected = _usage_from(reply.events())
        usage = UsageSnapshot.model_validate(usage_of(settled(gw)))
        assert usage.offline and not usage.billed and usage.pricing == "orch/data/pricing.json"
        worker = usage.workers[1]
        assert (
            worker.requests == 1
            and Tokens.model_validate(worker.model_dump(include=set(Tokens.model_fields))) == expected
        )
        price = load_pricing().cost("claude-sonnet-4-5-20250929", expected)
        assert price and abs(worker.cost_usd - price) < 1e-12 and worker.by_job["-"].requests == 1
        gw.client.set_job(1, "job-7")
        _turns(gw, token)
        usage = UsageSnapshot.model_validate(usage_of(settled(gw)))
        assert usage.workers[1].requests == 3 and usage.workers[1].by_job["job-7"].requests == 2
        assert usage.total.requests == 3
        ledger = ledger_of(settled(gw))
        assert [(e["kind"], e["tool"], e["job"]) for e in ledger] == [
            ("tool_use", "Bash", "job-7"),
            ("tool_result", None, "job-7"),
        ]
        assert ledger[1]["id"] == ledger[0]["id"] and ledger[1]["output"] == "hi\n"
        recorded = read_exchanges(settled(gw).exchanges(1))
        assert [(e.status, e.stream, e.key.kind, e.key.turn) for e in recorded] == [
            (200, True, "main", 1),
            (200, True, "main", 1),
            (200, True, "main", 3),
        ]
        assert recorded[0].body == reply.body.decode() and recorded[-1].job == "job-7"
        assert "x-api-key" not in str(recorded[0].headers)


def test_the_server_child_restarts_with_tokens_totals_and_ledger_intact(tmp_path: Path) -> None:
    with gateway(tmp_path) as gw:
        token = gw.client.mint_token(1)
        gw.client.set_job(1, "j")
        _, second = _turns(gw, token)
        before = usage_of(settled(gw))["total"]
        child = health(gw)
        os.kill(child["pid"], signal.SIGKILL)
        wait_until(lambda: _life(gw) == 2, 20, "a restarted server child")
        assert health(gw)["pid"] != child["pid"]
        assert call(gw.base(token) + "/v1/messages", second).status == 200  # a retry of turn 2, same token
        after = usage_of(settled(gw))["total"]
        assert after["requests"] == before["requests"] + 1  # the retry, nothing counted twice
        kinds = [e["kind"] for e in ledger_of(settled(gw))]
        assert kinds == ["tool_use", "tool_result"]  # the retry's tool result was logged in the first life
        assert read_exchanges(settled(gw).exchanges(1))[-1].job == "j"  # the job survived too
        restarts = [e for e in events_of(gw.folder) if e["event"] == "started" and "restart" in e["data"]]
        assert len(restarts) == 1 and restarts[0]["data"]["life"] == 2


def _life(gw: Running) -> int | None:
    try:
        return int(health(gw)["life"])
    except (AssertionError, OSError):
        return None


def test_budget_refusal(tmp_path: Path) -> None:
    with gateway(tmp_path) as gw:
        one, two = gw.client.mint_token(1), gw.client.mint_token(2)
        gw.client.set_budget(GatewayBudget(max_tokens_per_worker=1))
        assert GatewayBudget.model_validate_json(gw.folder.model_budget.read_text()).max_tokens_per_worker == 1
        assert call(gw.base(one) + "/v1/messages", main_call()).status == 200  # at 0 of 1: still served
        for _ in range(2):
            reply = call(gw.base(one) + "/v1/messages", main_call())
            assert reply.status == 400 and reply.headers["x-should-retry"] == "false"
            error = reply.json()["error"]
            assert error["type"] == "invalid_request_error"
            assert error["message"].startswith("orch gateway: budget exceeded: worker 1 used")
        assert call(gw.base(two) + "/v1/messages", main_call()).status == 200  # its own budget is fine
        usage = usage_of(settled(gw))
        assert usage["workers"]["1"]["refused"] and usage["workers"]["1"]["requests"] == 1
        exceeded = [e for e in events_of(gw.folder) if e["event"] == "budget-exceeded"]
        assert [(e["worker"], e["data"]["scope"]) for e in exceeded] == [(1, "worker")]
        gw.client.set_budget(GatewayBudget(max_tokens=1))
        reply = call(gw.base(two) + "/v1/messages", main_call())
        assert reply.status == 400 and "the fleet used" in reply.json()["error"]["message"]
        assert usage_of(settled(gw))["refused"].startswith("the fleet used")


def test_replay_answers_from_the_recording_without_an_upstream(tmp_path: Path) -> None:
    live = tmp_path / "live"
    live.mkdir()
    with gateway(live) as gw:
        token = gw.client.mint_token(1)
        _, second = _turns(gw, token)
        recorded = read_exchanges(settled(gw).exchanges(1))
    replay_dir = tmp_path / "replayed"
    replay_dir.mkdir()
    (replay_dir / "run").mkdir()
    boot = boot_for(replay_dir / "run", None, replay=str(live / "run"))
    with gateway(replay_dir, boot) as rp:
        token = rp.client.mint_token(1)
        reply = call(rp.base(token) + "/v1/messages", second)
        assert reply.status == 200 and reply.body.decode() == recorded[-1].body
        assert reply.headers["content-type"].startswith("text/event-stream")
        miss = call(rp.base(token) + "/v1/messages", main_call("a conversation never recorded"))
        assert miss.status == 400 and miss.headers["x-should-retry"] == "false"
        assert miss.json()["error"]["message"].startswith("orch gateway: replay: ")
        assert [e["event"] for e in events_of(rp.folder) if e["event"] == "replay-miss"] == ["replay-miss"]
        usage = usage_of(settled(rp))
        assert usage["billed"] is False and usage["workers"]["1"]["requests"] == 1
        assert len(read_exchanges(settled(rp).exchanges(1))) == 1  # replayed exchanges are recorded again
        assert [e["kind"] for e in ledger_of(settled(rp))] == ["tool_result"]

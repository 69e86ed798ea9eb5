"""Pricing and the books: longest-prefix prices, costs, unknown models, budgets that refuse once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orch.errors import UsageError
from orch.gateway.books import Books
from orch.gateway.eventlog import EventLog
from orch.gateway.modeldir import GatewayBudget, Tokens
from orch.gateway.pricing import SHIPPED, Price, Pricing, PricingTable, load_pricing
from orch.run.folder import RunFolder
from tests.gateway.gw import events_of

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

TABLE = Pricing(
    PricingTable(
        models={
            "claude-opus-4": Price(input=15, output=75, cache_write=18.75, cache_read=1.5),
            "claude-opus-4-5": Price(input=5, output=25, cache_write=6.25, cache_read=0.5),
        }
    ),
    "test",
)


@pytest.mark.parametrize(
    ("model", "input_price"),
    [("claude-opus-4-20250514", 15), ("claude-opus-4-5-20251101", 5), ("claude-opus-4-1", 15), ("gpt-5", None)],
)
def test_longest_prefix(model: str, input_price: float | None) -> None:
    price = TABLE.price(model)
    assert (price.input if price else None) == input_price


def test_cost() -> None:
    tokens = Tokens(
        input_tokens=1_000_000, output_tokens=1000, cache_creation_input_tokens=10, cache_read_input_tokens=1
    )
    assert TABLE.cost("claude-opus-4-5", tokens) == pytest.approx(5 + 0.025 + 6.25e-5 + 5e-7)


def test_the_shipped_table_and_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = load_pricing()
    assert shipped.origin == SHIPPED and shipped.price("claude-sonnet-4-5-20250929") is not None
    mine = tmp_path / "p.json"
    mine.write_text(json.dumps({"models": {"x": {"input": 1, "output": 2, "cache_write": 3, "cache_read": 4}}}))
    monkeypatch.setenv("ORCH_PRICING", str(mine))
    assert load_pricing().origin == str(mine)
    mine.write_text('{"models": {"x": {"input": 1}}}')
    with pytest.raises(UsageError, match=r"pricing file .* is malformed: models.x.output: Field required"):
        load_pricing()
    with pytest.raises(UsageError, match="cannot read pricing file"):
        load_pricing(str(tmp_path / "absent.json"))


def _books(tmp_path: Path) -> tuple[Books, RunFolder]:
    folder = RunFolder(tmp_path)
    folder.model_dir.mkdir(parents=True, exist_ok=True)
    return Books(folder, TABLE, EventLog(folder.model_log), offline=True, replay=False), folder


def test_counts_by_worker_model_job_and_notes_an_unknown_model_once(tmp_path: Path) -> None:
    books, folder = _books(tmp_path)
    books.count(1, None, "claude-opus-4-5", Tokens(input_tokens=100, output_tokens=10))
    books.count(1, "j1", "mystery", Tokens(input_tokens=1))
    books.count(2, "j1", "mystery", Tokens(input_tokens=1))
    w1 = books.usage.workers[1]
    assert w1.requests == 2 and w1.by_job["-"].requests == 1 and w1.by_job["j1"].input_tokens == 1
    assert w1.by_model["mystery"].cost_usd == 0 and w1.cost_usd > 0
    assert books.usage.total.requests == 3 and books.usage.total.total == 112
    notes = [e for e in events_of(folder) if e["event"] == "no-price"]
    assert [n["data"]["note"] for n in notes] == ["no price for model mystery"]


def test_budget_refusals_are_announced_once(tmp_path: Path) -> None:
    books, folder = _books(tmp_path)
    books.set_budget(GatewayBudget(max_tokens_per_worker=10, max_cost_usd=1.0))
    assert books.refusal(1) is None
    books.count(1, None, "claude-opus-4-5", Tokens(input_tokens=10))
    assert books.refusal(1) == "worker 1 used 10 tokens of its 10 cap"
    assert books.refusal(1) is not None and books.refusal(2) is None
    books.count(2, None, "claude-opus-4", Tokens(output_tokens=20_000))  # $1.50
    assert books.refusal(2) == "the fleet spent $1.5001 of its $1.0000 cap"  # worker 1 spent $0.0001
    assert books.usage.refused and books.usage.workers[1].refused
    kinds = [(e["worker"], e["data"]["scope"]) for e in events_of(folder) if e["event"] == "budget-exceeded"]
    assert kinds == [(1, "worker"), (2, "fleet"), (2, "worker")]  # 20k tokens: over its own cap too
    books.set_budget(GatewayBudget())  # caps lifted: served again
    usage = books.usage  # read afresh: mypy keeps the narrowing of books.usage.refused across the call
    assert books.refusal(1) is None and usage.refused is None and usage.workers[1].refused is None

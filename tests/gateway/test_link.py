"""What the lead reads from a run's `model/` (orch.gateway.link): files as the gateway writes them."""

from __future__ import annotations

from pathlib import Path

from orch.gateway.link import GatewayLink, gateway_budget
from orch.gateway.modeldir import GatewayBudget, GatewayEvent, GatewayEventKind, UsageSnapshot, WorkerUsage, read_usage
from orch.gateway.process import handle_path, save_handle
from orch.run.files import JsonlTail, append_line
from orch.run.folder import RunFolder
from orch.spec.model import Budget
from tests.gateway.gw import boot_for, call, gateway, main_call


def _run(tmp_path: Path, gateway: bool = True) -> RunFolder:
    run = RunFolder(tmp_path / "r")
    run.root.mkdir()
    if gateway:
        run.model_dir.mkdir()
    return run


def test_refusals_come_from_usage_and_the_gateways_events(tmp_path: Path) -> None:
    run = _run(tmp_path)
    link = GatewayLink(run)
    assert link.refusals() == {}
    usage = UsageSnapshot(
        offline=True, billed=False, pricing="shipped", updated=1.0, workers={2: WorkerUsage(refused="w2 over $1")}
    )
    run.model_usage.write_text(usage.model_dump_json())
    append_line(run.model_log, GatewayEvent(ts=1, event=GatewayEventKind.STARTED).model_dump_json())
    append_line(
        run.model_log,
        GatewayEvent(
            ts=2, event=GatewayEventKind.BUDGET_EXCEEDED, worker=1, data={"scope": "fleet", "reason": "fleet over $5"}
        ).model_dump_json(),
    )
    assert link.refusals() == {2: "w2 over $1", None: "fleet over $5"}


def test_jsonl_tail_reads_only_complete_new_lines(tmp_path: Path) -> None:
    path = tmp_path / "g.jsonl"
    tail = JsonlTail(path, GatewayEvent)
    assert tail.records() == []
    line = GatewayEvent(ts=1, event=GatewayEventKind.STARTED).model_dump_json()
    path.write_text(line + "\nnot json\n" + line[:10])
    assert len(tail.records()) == 1
    with path.open("a") as fh:
        fh.write(line[10:] + "\n")
    assert len(tail.records()) == 2


def test_a_run_without_a_gateway_has_no_usage_and_nothing_to_tell(tmp_path: Path) -> None:
    run = _run(tmp_path, gateway=False)
    link = GatewayLink(run)
    assert read_usage(run) is None
    assert link.set_budget(Budget(max_tokens=5)) is None
    assert link.set_job(1, "t1") is None


def test_a_run_whose_gateway_does_not_answer_says_why(tmp_path: Path) -> None:
    assert GatewayLink(_run(tmp_path)).set_job(1, "t1") is not None


def test_the_budget_maps_field_for_field() -> None:
    caps = Budget(max_cost_usd=2, max_cost_per_worker_usd=1, max_tokens=10, max_tokens_per_worker=5)
    assert gateway_budget(caps).model_dump() == caps.model_dump()


def test_the_budget_and_jobs_reach_a_real_gateway(tmp_path: Path) -> None:
    run = RunFolder.for_name("linked")
    run.root.mkdir(parents=True)
    boot = boot_for(run.root).model_copy(update={"run": run.name})
    with gateway(tmp_path, boot) as gw:
        link = GatewayLink(run)
        assert link.set_budget(Budget(max_tokens=5)) is not None  # no handle saved yet: said, not raised
        save_handle(handle_path(run.name), gw.handle)
        assert link.set_budget(Budget(max_tokens=5, max_cost_usd=1)) is None
        assert GatewayBudget.model_validate_json(run.model_budget.read_text()).max_tokens == 5
        assert link.set_job(1, "t1") is None
        assert link.set_job(1, None) is None


def test_a_real_gateways_refusal_is_read_as_the_workers(tmp_path: Path) -> None:
    run = RunFolder.for_name("refusing")
    run.root.mkdir(parents=True)
    with gateway(tmp_path, boot_for(run.root).model_copy(update={"run": run.name})) as gw:
        save_handle(handle_path(run.name), gw.handle)
        link = GatewayLink(run)
        assert link.set_budget(Budget(max_tokens_per_worker=1)) is None
        base = gw.base(gw.client.mint_token(1))
        assert call(f"{base}/v1/messages", main_call(stream=False)).status == 200
        refused = call(f"{base}/v1/messages", main_call(stream=False))
        assert refused.status == 400, refused.body
        refusals = link.refusals()
        assert list(refusals) == [1] and refusals[1]
        usage = read_usage(run)
        assert usage is not None and usage.workers[1].total > 1

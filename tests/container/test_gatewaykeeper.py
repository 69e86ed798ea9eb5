"""The gateway's keeper (a container run's gateway is started under it), run here with the real gateway and
the scripted model: a supervisor SIGKILLed is started again with the same boot line, on the same address,
with the workers' tokens, the budget and the books it had; a first start that fails ends the keeper with its
exit code; SIGTERM stops both cleanly; the keeper and its gateway both killed end the run at once.
(In a real container, as the gateway's uid: tests/scenarios/test_gateway_docker.py.)"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orch import procs
from orch.container.gatewaykeeper import _ready_fd
from orch.container.init import KEEPER
from orch.errors import OrchError
from orch.exitcodes import Exit
from orch.gateway.modeldir import GatewayBudget, read_usage
from orch.gateway.process import (
    GatewayClient,
    GatewayHandle,
    handle_path,
    load_handle,
    save_handle,
    start_gateway,
    state_path,
)
from orch.jobs.state import JobStatus
from orch.lead import outcome
from orch.lead.recovery import Recovery
from orch.run.folder import RunFolder
from orch.waits import wait_until
from tests.gateway.gw import Running, boot_for, call, events_of, main_call
from tests.lead.desks import Parts, parts

PREFIX = [sys.executable, "-m", KEEPER, "--"]


def _handle_pid(path: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError, KeyError):
        return int(json.loads(path.read_text())["pid"])
    return None


@pytest.fixture
def kept(tmp_path: Path) -> Iterator[Running]:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    boot = boot_for(run_dir)
    handle_file, log = tmp_path / "handle.json", tmp_path / "gateway.log"
    handle = start_gateway(boot, handle_file, log, argv_prefix=PREFIX)
    keeper = os.getpgid(handle.pid)  # it leads the gateway's session, as the container's init records
    kept = GatewayHandle(url=handle.url, pid=keeper, control_key=boot.control_key)
    running = Running(kept, handle_file, log, RunFolder(run_dir))
    try:
        yield running
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(keeper, signal.SIGTERM)
        wait_until(lambda: not procs.alive(keeper), 20, "the keeper to stop")


def test_a_killed_supervisor_comes_back_with_its_address_tokens_and_books(kept: Running) -> None:
    token = kept.client.mint_token(1)
    kept.client.set_budget(GatewayBudget(max_cost_usd=50.0))
    assert call(kept.base(token) + "/v1/messages", main_call()).status == 200
    kept.client.settle()
    first = _handle_pid(kept.handle_file)
    assert first is not None and first != kept.handle.pid

    os.kill(first, signal.SIGKILL)
    wait_until(lambda: _handle_pid(kept.handle_file) not in (None, first), 30, "the keeper's new supervisor")
    wait_until(kept.client.health, 30, "the gateway to answer again on its old address")
    assert procs.alive(kept.handle.pid)  # the keeper itself lives on: the controller's handle stays true

    # The worker's token of the last life still works; the call is recorded and counted with the first.
    reply = call(kept.base(token) + "/v1/messages", main_call("again"))
    assert reply.status == 200, reply.body
    kept.client.settle()
    usage = read_usage(kept.folder)
    assert usage is not None and usage.total.requests == 2 and usage.workers[1].requests == 2
    assert json.loads(kept.folder.model_budget.read_text())["max_cost_usd"] == 50.0
    resumed = [e for e in events_of(kept.folder) if e["event"] == "started" and e["data"].get("resumed")]
    assert resumed and resumed[-1]["data"]["tokens"] == 1, events_of(kept.folder)
    assert len(list(kept.folder.model_dir.glob("exchanges-*.jsonl.gz"))) >= 1
    assert "starting it again" in kept.log.read_text()


def test_sigterm_stops_keeper_and_gateway_cleanly(kept: Running) -> None:
    supervisor = _handle_pid(kept.handle_file)
    assert supervisor is not None
    os.kill(kept.handle.pid, signal.SIGTERM)
    wait_until(lambda: not procs.alive(kept.handle.pid) and not procs.alive(supervisor), 20, "both to stop")
    assert not state_path(kept.handle_file).exists()  # a clean stop: nothing to resume


def test_a_first_start_that_fails_ends_the_keeper_with_its_code(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    boot = boot_for(run_dir, listen="no-port")
    with pytest.raises(OrchError, match=r"exited at start \(exit 2\)"):
        start_gateway(boot, tmp_path / "handle.json", tmp_path / "gateway.log", argv_prefix=PREFIX)
    with pytest.raises(OrchError):
        load_handle(tmp_path / "handle.json")


def _aborted(run: Parts) -> str | None:
    return run.state.aborted  # read again after each look (a narrowed attribute would not be)


def test_keeper_and_gateway_both_killed_end_the_run_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The OOM killer taking the keeper with its gateway: nothing in a container may start the gateway again as
    its uid, so the controller's next look aborts the run saying why (not its jobs one by one, much later)."""
    monkeypatch.setenv("ORCH_IN_CONTAINER", "1")
    run = parts(tmp_path)
    recovery = Recovery(run.desk, run.review, run.dispatch)
    boot = boot_for(run.run.root)
    handle = start_gateway(boot, tmp_path / "handle.json", tmp_path / "gateway.log", argv_prefix=PREFIX)
    keeper = os.getpgid(handle.pid)
    # Where the container's init saves it: the keeper's pid (orch.container.init).
    save_handle(handle_path("r"), handle.model_copy(update={"pid": keeper}))
    try:
        recovery.keep_gateway()
        assert _aborted(run) is None  # kept and answering

        os.kill(keeper, signal.SIGKILL)  # the keeper alone: its gateway still answers, the run goes on
        wait_until(lambda: not procs.alive(keeper), 20, "the keeper to die")
        recovery.keep_gateway()
        assert _aborted(run) is None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(keeper, signal.SIGKILL)  # then everything of the gateway's
    wait_until(lambda: not GatewayClient(handle).health(), 30, "the gateway to stop answering")
    recovery.keep_gateway()
    reason = _aborted(run)
    assert reason is not None and "the model gateway and its keeper" in reason
    assert [e["data"]["reason"] for e in run.events("aborted")] == [run.state.aborted]
    assert all(job.status is JobStatus.CANCELLED for job in run.state.jobs)
    done = outcome.decide(run.state, run.desk.spec)  # report.json's
    assert (done.exit_code, done.reason) == (Exit.FAILED, run.state.aborted)


def test_the_first_supervisor_alone_gets_its_starters_ready_pipe() -> None:
    """start_gateway waits on a pipe (`--ready-fd`): the keeper hands it to its first supervisor and closes its own
    copy, so the starter sees EOF if that supervisor dies; one started again has no starter waiting."""
    argv = [sys.executable, "-m", "orch.gateway", "--handle", "h.json", "--ready-fd", "7"]
    assert _ready_fd(argv) == (argv[:5], 7)
    assert _ready_fd(argv[:5]) == (argv[:5], None)

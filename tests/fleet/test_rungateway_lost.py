"""A gateway whose supervisor is gone is replaced by `ensure` (what the controller's keep_gateway calls) even
while its server child still answers: the child got SIGTERM with its supervisor and is closing (in the
fast tier's killed-gateway scenario it answered the controller's health check, then refused its budget, and
no new gateway was started). The decision is the supervisor's pid, never a still-answering orphan."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path

from orch import procs
from orch.fleet import rungateway
from orch.gateway.process import GatewayClient, GatewayHandle, handle_path, save_handle
from orch.run.folder import RunFolder
from orch.waits import wait_until
from tests.gateway.gw import call, main_call
from tests.helpers import run_info


def test_a_gateway_whose_supervisor_is_gone_is_replaced_while_its_orphan_still_answers(tmp_path: Path) -> None:
    run = RunFolder.for_name("orphan")
    info = run_info("orphan", workdir=str(tmp_path))
    info.offline = True
    run.create(info)
    old = rungateway.ensure(run, info)
    server = int(GatewayClient(old).info()["pid"])
    token = GatewayClient(old).mint_token(1)
    # The handle names a supervisor that is gone (a reaped process's pid), while the old gateway answers on:
    # what `ensure` sees when a supervisor died and its child has not yet closed. It must not trust that answer.
    gone_pid = _reaped_pid()
    save_handle(handle_path("orphan"), GatewayHandle(url=old.url, pid=gone_pid, control_key=old.control_key))
    assert GatewayClient(old).health() and rungateway.lost(info) is not None
    result: list[GatewayHandle | BaseException] = []

    def replace() -> None:
        try:
            result.append(rungateway.ensure(run, info))
        except BaseException as exc:  # reported by the assertion below
            result.append(exc)

    thread = threading.Thread(target=replace, daemon=True)
    try:
        thread.start()
        # The new supervisor waits for the old address; the old one dies now, as the scenario's did, and its
        # child (SIGTERM from the kernel) lets the address go.
        wait_until(lambda: _new_supervisor(old.pid, server) or result, 30, "ensure to start a new supervisor")
        assert not result, f"ensure returned without starting a gateway: {result}"
        os.kill(old.pid, signal.SIGKILL)
        thread.join(60)
        assert result and isinstance(result[0], GatewayHandle), result
        new = result[0]
        assert new.pid not in (old.pid, gone_pid) and new.url == old.url
        assert GatewayClient(new).health()
        assert int(GatewayClient(new).info()["pid"]) != server
        wait_until(lambda: not procs.alive(server), 15, "the old server child to die with its supervisor")
        reply = call(f"{new.url}/t/{token}/v1/messages", main_call("hi"), headers={"x-api-key": token})
        assert reply.status == 200, reply.body  # the worker's token lives on in the new gateway
        started = [e for e in map(json.loads, run.events.read_text().splitlines()) if e["event"] == "gateway-started"]
        assert len(started) == 2 and started[1]["data"]["replaces"] == gone_pid
        assert not [
            e for e in map(json.loads, run.events.read_text().splitlines()) if e["event"] == "gateway-unanswered"
        ]
    finally:
        thread.join(60)
        if procs.alive(old.pid):
            os.kill(old.pid, signal.SIGKILL)
        rungateway.stop("orphan")


def _reaped_pid() -> int:
    """The pid of a process that ran and was reaped: nothing runs under it now."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _new_supervisor(old: int, server: int) -> int | None:
    """A gateway supervisor this process started that is neither the old one nor its child."""
    for pid in procs.children(os.getpid()):
        if pid not in (old, server) and "orch.gateway" in procs.cmdline(pid):
            return pid
    return None

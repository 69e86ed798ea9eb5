"""A finder that lies on purpose in a local run, under local strict isolation (each worker in its own
bubblewrap sandbox, orch.backends.local.bwrap): real Claude Code executing scripted tool calls poses as another
worker on the bus, writes bus.md itself, plants the defect it reports, leaves a forger running that
writes CONFIRMED verdicts into whichever worker verifies it, and a hoarder holding as many bus connections
open as it can (to spend the relay's file descriptors). As in a container (tests/container/
test_hostile.py), the false finding is not CONFIRMED, the run's exit code says so, every attempt is
refused and flagged, and the honest finding stands."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from orch.jobs.state import load_state
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import Isolation
from tests.helpers import SAMPLE, orch
from tests.hostile import hostile_finder_tasks, spec  # the same attacker as in a container

pytestmark = [
    pytest.mark.claude,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]

HOARDER = r"""
import os, socket, sys, time
path, out = os.path.join(sys.argv[1], "bus.sock"), sys.argv[2]
held, refused, end = [], 0, time.time() + 120
while time.time() < end:
    while len(held) < 40:  # keep 40 connections to its bus open, saying nothing on them
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except OSError:
            sock.close()
            break
        sock.setblocking(False)
        held.append(sock)
    for sock in list(held):
        try:
            data = sock.recv(4096)
        except BlockingIOError:
            continue
        except OSError:
            data = b""
        refused += b"too many open bus connections" in data
        held.remove(sock)
        sock.close()
    with open(out, "w") as fh:
        fh.write(str(refused))
    time.sleep(0.2)
"""
"""Holds as many connections to its bus socket as it can, to spend the relay's descriptors."""


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, claude_bin: Path) -> None:
    monkeypatch.setenv("ORCH_CLAUDE_BIN", str(claude_bin))
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_CONFIG_DIR"):
        monkeypatch.delenv(var, raising=False)


def test_a_hostile_finder_cannot_get_its_false_finding_confirmed_locally(offline: None, tmp_path: Path) -> None:
    sample = tmp_path / "work"
    shutil.copytree(SAMPLE, sample)
    pristine = (sample / "stats.py").read_text()
    hoard = [  # and a process holding the controller's bus connections (capped per worker)
        {"write": "{{run_dir}}/outbox/agent-{{worker}}/hoarder.py", "content": HOARDER},
        {
            "bash": "setsid nohup python3 {{run_dir}}/outbox/agent-{{worker}}/hoarder.py {{run_dir}} "
            "{{run_dir}}/outbox/agent-{{worker}}/refused >/dev/null 2>&1 </dev/null & echo started"
        },
    ]
    path = spec(tmp_path / "fleet.yaml", sample, hostile_finder_tasks(hoard))
    result = orch("run", str(path), "--local", "--name", "hostile")
    run = RunFolder.for_name("hostile")
    assert "isolation strict" in result.output, result.output
    assert run.info().isolation is Isolation.STRICT

    report = json.loads(run.report_json.read_text())
    statuses = {row["id"]: row["status"] for row in report["findings"]}
    assert statuses == {"t1-F1": "REFUTED", "t2-F1": "CONFIRMED"}, result.output
    assert result.exit_code == 0, result.output  # the false finding refuted: caught, as designed
    forged = [v for v in load_state(run).verdicts if v.finding == "t1-F1"]
    assert forged and all(v.report.verdict.value == "REFUTED" and v.verifier != 1 for v in forged)
    # Nothing it tried took: the tree, the bus, the other outboxes are intact...
    assert (sample / "stats.py").read_text() == pristine
    bus = run.bus.read_text()
    assert "[W2] t1-F1" not in bus and "[W2] W2 here" not in bus
    log = (run.outbox(1) / "forger.log").read_text()
    assert "DENIED" in log and "WROTE" not in log and "POST as" in log, log
    for n in (2, 3):
        assert not run.result(n).exists() or "forged" not in run.result(n).read_text()
    # ... and each attempt is flagged where the user looks.
    lines = [json.loads(line) for line in run.events.read_text().splitlines()]
    refused = [e for e in lines if e["event"] == Event.BUS_POST_REFUSED.value and e["worker"] == 1]
    assert refused and "can only name yourself" in str(refused[0]["data"])
    left = [e for e in lines if e["event"] == Event.LEFTOVER_PROCESSES.value and e["worker"] == 1]
    assert left and any("forger.py" in cmd for cmd in left[0]["data"]["processes"].values())
    assert not any("bwrap" in cmd for e in left for cmd in e["data"]["processes"].values())  # its sandbox: not
    capped = [e for e in lines if e["event"] == Event.CONNECTIONS_CAPPED.value]
    assert capped and {(e["worker"], e["data"]["socket"]) for e in capped} == {(1, "posts.sock")}
    assert int((run.outbox(1) / "refused").read_text()) > 0  # the excess refused at once, one line each
    kinds = {(a["kind"], a["worker"]) for a in report["attempts"]}
    assert {("bus-post-refused", 1), ("leftover-processes", 1), ("connections-capped", 1)} <= kinds
    assert "bubblewrap" in run.report_md.read_text()

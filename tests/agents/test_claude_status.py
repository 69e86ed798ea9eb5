"""Claude Code's status line as orch seeds it (orch.agents.claude.status_command), run by a real shell: the
payload saved whole and atomically where the worker's ready marker is, the label printed, nothing left over."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from orch.agents.claude import status_command
from orch.run.folder import RunFolder
from tests.helpers import run_info


def test_the_status_line_saves_the_payload_and_prints_the_label(tmp_path: Path) -> None:
    run = RunFolder(tmp_path / "demo")
    run.create(run_info("demo"))
    payload = {"session_id": "s9", "cost": {"total_cost_usd": 0.25}, "workspace": {"current_dir": "/w o r k"}}
    env = {"PATH": os.environ["PATH"], "ORCH_WORKER": "3"}
    for cost in (0.25, 0.5):  # saved again on every refresh
        payload["cost"] = {"total_cost_usd": cost}
        command = status_command(run.status_line(1))
        done = subprocess.run(["sh", "-c", command], input=json.dumps(payload), env=env, capture_output=True, text=True)
        assert (done.returncode, done.stdout, done.stderr) == (0, "orch W3\n", "")
    assert json.loads(run.status_line(1).read_text()) == payload
    line = run.status_line_info(1)
    assert line is not None and (line.session_id, line.cost_usd) == ("s9", 0.5)
    assert sorted(p.name for p in run.status_line(1).parent.iterdir()) == ["status.json"]

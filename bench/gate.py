"""The gate's overhead (issue 22): the same writers, gated and ungated, side by side in one run.

Two writers change the changes demo's tiny calculator (a git repository made fresh per run), each in its own
worktree, with orch's scripted agent offline (its tool calls from the run's gateway and scripted model, so a
reviewer's commands are in the ledger and its approval stands), on 3 workers, `orch run --local` to the end:
- gated: the demo's check, the default protected paths (scope) and `reviewers_per_change: 1` (a review job
  per change, on another worker, in a read-only checkout of base + patch);
- ungated: no check, `protect: []`, `reviewers_per_change: 0`.
Each repeat runs both under the same load, in turns (ungated first on even repeats, gated first on odd ones:
the first run of a bench pays the cold caches); the ratio row pairs them repeat by repeat. Both must
land both changes, or the repeat is an error (a gate that refused them would measure something else).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.core import Context, Result
from bench.env import orch_cli, python_env
from bench.pairs import paired, ratios
from bench.table import Row
from orch.entry.demo import DEMO_AUTHOR
from orch.lead.changes.gate import sandbox_available
from orch.run.folder import RunFolder

SAMPLE = Path(__file__).parents[1] / "orch" / "data" / "demo" / "changes" / "sample"
CHECK = "python3 -B test_calc.py"
EDITS = {
    "mean": "s|return sum(values) / len(values)|return sum(values) / len(values) if values else 0.0|",
    "clamp": "s|return max(low, min(x, high))|return min(max(x, low), high)|",
}
RUN_TIMEOUT = 600.0


def _writer(task: str, worker: int, edit: str) -> dict[str, Any]:
    script = [
        {"bash": f"cd {{{{workdir}}}} && sed -i '{edit}' calc.py && {CHECK}"},
        {"write": "{{result_file}}", "content": f"{task}: done\n"},
        {"bash": "touch {{done_file}}"},
        {"reply": "Finished: one change."},
    ]
    return {
        "id": task,
        "role": "writer",
        "goal": f"Change {task}.",
        "files": ["calc.py"],
        "worker": worker,
        "offline_script": script,
    }


def spec(workdir: Path, gated: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "workdir": str(workdir),
        "agent": "scripted",
        "offline": True,
        "workers": 3,
        "tasks": [_writer(task, n, edit) for n, (task, edit) in enumerate(EDITS.items(), start=1)],
        "timeouts": {"boot": 120, "job": 300, "run": int(RUN_TIMEOUT)},
        "changes": {"reviewers_per_change": 1 if gated else 0},
    }
    if gated:
        out["checks"] = [CHECK]
    else:
        out["protect"] = []
    return out


def _repository(root: Path) -> Path:
    shutil.copytree(SAMPLE, root)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], [*DEMO_AUTHOR, "commit", "-q", "-m", "calc"]):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    return root


def one_run(ctx: Context, gated: bool) -> float:
    """Wall seconds of one `orch run` of the two writers to its end."""
    tmp = Path(tempfile.mkdtemp(dir=ctx.env.root))
    work = _repository(tmp / "repo")
    path = tmp / "fleet.yaml"
    path.write_text(yaml.safe_dump(spec(work, gated), sort_keys=False), encoding="utf-8")
    name = ctx.env.name("gated" if gated else "ungated")
    started = time.perf_counter()
    done = subprocess.run(
        orch_cli("run", str(path), "--local", "--name", name, "--quiet"),
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    wall = time.perf_counter() - started
    run = RunFolder.for_name(name)
    report = json.loads(run.report_json.read_text()) if run.report_json.is_file() else {}
    statuses = {row["task"]: row["status"] for row in report.get("changes", [])}
    if done.returncode != 0 or statuses != dict.fromkeys(EDITS, "LANDED"):
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        raise RuntimeError(f"{name}: exit {done.returncode}, changes {statuses}: {tail[0]}")
    shutil.rmtree(tmp, ignore_errors=True)  # the run folder stays under ORCH_HOME (--keep keeps it)
    return wall


def run(ctx: Context) -> Result:
    why = sandbox_available()
    if why is not None:
        return Result(skipped=f"the checks' sandbox: {why}")
    ungated, gated = paired(ctx.config.repeat, lambda on: one_run(ctx, gated=on), False, True)
    load = os.getloadavg()[0]
    rows = [
        Row("gate", "2 writers, ungated (no check, protect: [], no review): orch run wall", "s", ungated),
        Row("gate", "the same, gated (1 check, scope, 1 review per change): orch run wall", "s", gated),
        Row(
            "gate",
            "gated / ungated",
            "x",
            ratios(gated, ungated),
            note=f"load average {load:.1f} at the end",
        ),
    ]
    return Result(rows=rows, raw={"ungated": ungated, "gated": gated, "load": load})

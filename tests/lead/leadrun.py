"""A run of the automated lead driven by the scripted model: specs with offline scripts, and what to read back.

Shared by the fast tier (tests/scenarios/test_scripted.py: orch's scripted agent) and the claude tier
(tests/scenarios/test_claude_lead.py: the real Claude Code binary): the same scripts play the same workers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from orch.jobs.state import ControllerState
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent
from orch.spec.model import Role
from tests.helpers import MEAN_QUOTE, MEAN_REPRO, PAGES_QUOTE, PAGES_REPRO, prompts


def finding(fid: str, claim: str, file: str, line: int, quote: str, repro: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": fid,
        "claim": claim,
        "severity": "high",
        "evidence": [{"file": file, "line": line, "quote": quote}] if quote else [],
    }
    if repro:
        out["reproduce"] = repro
    return out


def findings_step(*items: dict[str, Any], job: str = "{{job}}") -> dict[str, str]:
    return {"write": "{{findings_file}}", "content": json.dumps({"job": job, "findings": list(items)})}


RESULT = {"write": "{{result_file}}", "content": "checked what the brief asked\n"}
DONE = {"bash": "touch {{done_file}}"}


def reply(text: str = "Finished.") -> dict[str, str]:
    return {"reply": text}


PAGES_FINDING = finding("F1", "paginate(items, 1, size) skips the first page", "pages.py", 15, PAGES_QUOTE, PAGES_REPRO)
_STAMP = {"job": "{{job}}", "finding": "{{finding_id}}", "verdict": "CONFIRMED", "reason": "LGTM"}
_FALSE_QUOTE = [{"file": "pages.py", "line": 15, "quote": "start = (page - 1) * size"}]
_NEVER_RAN = [{"command": "python3 -m pytest tests/test_pages.py", "exit_code": 0, "output": "1 passed"}]
RUBBER_STAMP = [
    {"write": "{{verdict_file}}", "content": json.dumps(_STAMP)},
    RESULT,
    DONE,
    reply("Looks good to me."),
    {"write": "{{verdict_file}}", "content": json.dumps({**_STAMP, "evidence": _FALSE_QUOTE})},
    DONE,
    reply(),
    # It only echoes the command it cites (a real call in the ledger, with the command in it): not a run.
    {"bash": "echo 'python3 -m pytest tests/test_pages.py' && echo '1 passed'"},
    {"write": "{{verdict_file}}", "content": json.dumps({**_STAMP, "evidence": _NEVER_RAN})},
    DONE,
    reply(),
]
"""A verifier's script that confirms without evidence, then with a false quote, then citing a command it
never ran: each output rejected (no-evidence, false-evidence, unrun-command)."""
MEAN_FINDING = finding("F1", "mean([]) raises ZeroDivisionError", "stats.py", 10, MEAN_QUOTE, MEAN_REPRO)


def write_spec(path: Path, workdir: Path, tasks: list[dict[str, Any]], **extra: Any) -> Path:
    spec: dict[str, Any] = {
        "workdir": str(workdir),
        "offline": True,
        "tasks": tasks,
        "timeouts": {"boot": 120, "job": 240, "run": 420},
        "limits": {"nudge_after": 4, "max_corrections": 2, "rate_limit_wait": 1, "restart_backoff": 0.5},
    }
    for key, value in extra.items():
        spec[key] = {**spec.get(key, {}), **value} if isinstance(value, dict) else value
    if spec.get("workers") == 1 and any(t.get("role") in ("writer", "fixer", "scribe") for t in tasks):
        # One worker has nobody to review its change (orch refuses the spec): these writers' changes go unreviewed.
        spec["changes"] = {"reviewers_per_change": 0, **spec.get("changes", {})}
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def events(run: RunFolder, name: Event | None = None) -> list[ControllerEvent]:
    out = [ControllerEvent.model_validate_json(line) for line in run.events.read_text().splitlines()]
    return [e for e in out if name is None or e.event == name]


def assert_never_self_verified(state: ControllerState) -> None:
    for job in state.jobs:
        if job.role is Role.VERIFIER and job.worker is not None:
            assert job.finding is not None
            assert job.worker != state.finding(job.finding).finder, f"{job.id} went to its finder"


def assert_each_brief_sent_once(run: RunFolder, state: ControllerState) -> None:
    sent = [e.data["job"] for e in events(run, Event.BRIEF_SENT)]
    assert sorted(sent) == sorted(j.id for j in state.jobs if j.worker is not None), sent
    for book in state.workers:
        pointers = [p for p in prompts(run, book.n) if p.startswith("Read and follow the instructions in")]
        assert len(pointers) == len([j for j in state.jobs if j.worker == book.n]), (book.n, pointers)


def report(run: RunFolder) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(run.report_json.read_text())
    return data


def statuses(run: RunFolder) -> dict[str, str]:
    return {row["id"]: row["status"] for row in report(run)["findings"]}

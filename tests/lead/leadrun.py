"""A run of the automated lead driven by the scripted model: specs with offline scripts, what to read back, and
the demo's agreement of every command after it.

Shared by the fast tier (tests/scenarios/test_scripted.py: orch's scripted agent) and the claude tier
(tests/scenarios/test_claude_lead.py: the real Claude Code binary): the same scripts play the same workers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from orch.cli.outputs import LsOutput, ReadOutput, StatusOutput
from orch.jobs.state import ControllerState
from orch.report.model import RunReport
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent
from orch.spec.model import Role
from tests.helpers import MEAN_QUOTE, MEAN_REPRO, PAGES_QUOTE, PAGES_REPRO, orch, prompts
from tests.report.ciformats import junit, valid_sarif


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


# --- the demo, and every command after it, agreeing it went as designed ------------------------------------------
DEMO = "demo"


def assert_the_demo_went_as_designed(run: RunFolder, output: str) -> None:
    """`orch run`'s (or `orch demo`'s) output and everything after it say the demo went as designed: status,
    ls, read of a stopped worker, report, report.junit.xml and report.sarif (the fast tier's scripted demo and
    the claude tier's real one)."""
    _the_run_reads_as_success(run, output)
    _status_and_ls_show_the_outcome_end_cost_and_each_workers_jobs(run)
    stopped = orch("read", DEMO, "2")
    assert stopped.exit_code == 0, stopped.output
    assert "\x1b" not in stopped.output and "Finished: one finding." in stopped.output
    shown = ReadOutput.model_validate_json(orch("read", DEMO, "2", "--lines", "5", "--json").output)
    assert shown.source == "transcript" and shown.lines == stopped.output.rstrip("\n").splitlines()[-5:]
    _report_junit_and_sarif_agree(run)


def _the_run_reads_as_success(run: RunFolder, output: str) -> None:
    assert "run demo: passed (exit 0): all tasks done; 2 finding(s): 1 CONFIRMED, 1 REFUTED" in output
    assert "nothing billed (offline: orch's scripted model answered)" in output
    report = RunReport.model_validate_json(run.report_json.read_text())
    assert (report.exit_code, report.status) == (0, "passed")
    assert {f.id: (f.status.value, f.fails) for f in report.findings} == {
        "pages-F1": ("CONFIRMED", False),
        "stats-F1": ("REFUTED", False),
    }
    # Only the folders the run used: no writers, so no worktrees/ or changes/.
    assert not run.worktrees_root.exists() and not run.changes_dir.exists()
    assert run.findings_dir.is_dir() and run.verdicts_dir.is_dir()


def _status_and_ls_show_the_outcome_end_cost_and_each_workers_jobs(run: RunFolder) -> None:
    shown = orch("status", DEMO)
    assert shown.exit_code == 0, shown.output
    assert "tmux server not running" not in shown.output
    head = shown.output.splitlines()[1]
    assert head.startswith("  passed (exit 0): all tasks done; 2 finding(s): 1 CONFIRMED, 1 REFUTED; ended ")
    assert "; cost $" in head and head.endswith(", nothing billed (offline: orch's scripted model answered)")
    assert "pages done: 1 finding(s)" in shown.output and "stats done: 1 finding(s)" in shown.output
    assert "COST (NOT BILLED)" in shown.output
    (view,) = StatusOutput.model_validate_json(orch("status", DEMO, "--json").output).runs
    assert view.outcome is not None and (view.outcome.status, view.outcome.exit_code) == ("passed", 0)
    assert view.finished is not None and view.started is not None and view.billed is False
    jobs = {j.job: (j.status, j.result) for w in view.workers for j in w.jobs}
    assert jobs["pages"] == ("done", "1 finding(s)") and jobs["stats"] == ("done", "1 finding(s)")
    verdicts = sorted(r or "" for job, (_, r) in jobs.items() if job.startswith(("pages-F1.", "stats-F1.")))
    assert verdicts == ["CONFIRMED", "CONFIRMED", "REFUTED", "REFUTED"]
    assert all(j.result_file and (run.root / j.result_file).is_file() for w in view.workers for j in w.jobs)
    listed = orch("ls")
    assert listed.exit_code == 0
    (row,) = [line for line in listed.output.splitlines() if line.startswith(f"{DEMO} ")]
    assert "passed (exit 0)" in row and "(nothing billed)" in row and " stopped " in row
    (entry,) = LsOutput.model_validate_json(orch("ls", "--json").output).runs
    assert entry.outcome == view.outcome and entry.finished is not None and entry.unbilled == view.unbilled


def _report_junit_and_sarif_agree(run: RunFolder) -> None:
    again = orch("report", DEMO)
    assert again.exit_code == 0, again.output
    assert "run demo: passed (exit 0)" in again.output and "nothing billed" in again.output
    assert json.loads(orch("report", DEMO, "--json").output)["status"] == "passed"
    xml = junit(run.report_junit)
    assert (xml.tests, xml.failures, xml.errors, xml.skipped) == (4, 0, 0, 0)  # 2 task jobs, 2 findings
    sarif = valid_sarif(run.report_sarif)
    (invocation,) = sarif["runs"][0]["invocations"]
    assert (invocation["exitCode"], invocation["executionSuccessful"]) == (0, True)
    results = {r["properties"]["finding"]: r for r in sarif["runs"][0]["results"]}
    assert "suppressions" not in results["pages-F1"] and results["pages-F1"]["level"] == "error"
    (suppressed,) = results["stats-F1"]["suppressions"]
    assert suppressed["justification"].startswith("REFUTED by its verifiers: W")
    # The report links each worker's readable transcript, which holds no escape sequence.
    page = run.report_html.read_text()
    for n in (1, 2, 3):
        assert f"logs/agent-{n}.txt" in page and "\x1b" not in run.transcript(n).read_text()
    assert "nothing billed" in page and "cost (nothing billed)" in run.report_md.read_text()
    assert orch("report", "no-such-run").exit_code == 2

"""Briefs for the changes flow: a reviewer's values (the task, the diff, the check results), the writer's list
of checks, and the offline reviewer's steps, generated from the change as a verifier's are from a finding.

Offline, a reviewer greps the first line the change adds (in its checkout of base + patch); `orch offline-verdict`
(orch.lead.verdictwriter) writes CONFIRMED (approve) when the spec's checks passed on the change's tree as the gate
ran them (orch's record: the writer's code never runs as the reviewer), REFUTED when they failed or the line is not
there. The controller checks that verdict like any other: that its own call wrote it, its commands against the
ledger and orch's records, its quote against the checkout.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from orch.errors import NotFoundError, OrchError
from orch.jobs.changes import Change
from orch.jobs.findings import CodeEvidence, Finding, RanCommand, Severity
from orch.jobs.state import ChangeBook, ControllerState, Job
from orch.lead import briefs, verdictwriter
from orch.lead.changes import agentfiles
from orch.run.files import read_model
from orch.run.folder import RunFolder
from orch.spec.model import FleetSpec, Role, ScriptStep
from orch.spec.placeholders import render_steps

HUNK_RE = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@")
OUTPUT_LINES = 6


def checks_list(checks: Sequence[str]) -> str:
    return "\n".join(f"- `{c}`" for c in checks) or "- (none: the spec has no `checks:`)"


def check_results(run: RunFolder, change: str) -> str:
    """The checks on the change's tree, one line each, from changes/<job>/checks.json."""
    path = run.change_checks(change)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "- (no checks were run)"
    lines = []
    for r in record.get("results", []):
        state = "timed out" if r.get("timed_out") else f"exit {r.get('exit_code')}"
        lines.append(f"- `{r.get('command')}`: {state}")
    return "\n".join(lines) or "- (no checks were run)"


def review_values(
    run: RunFolder, state: ControllerState, spec: FleetSpec, job: Job, n: int, checkout: Path, workers: int
) -> dict[str, str]:
    assert job.change is not None
    change = state.change(job.change)
    task = dict(zip(spec.task_ids(), spec.tasks, strict=True))[change.task]
    try:
        diffstat = run.change_diffstat(change.id).read_text(encoding="utf-8").strip()
    except OSError:
        diffstat = "(no diffstat)"
    values = briefs.job_values(run, state, job, n, checkout, workers)
    values.update(
        change_id=change.id,
        task_id=change.task,
        goal=task.goal.strip(),
        diff=str(run.change_patch(change.id)),
        diffstat="\n".join(f"    {line}" for line in diffstat.splitlines()),
        checks=check_results(run, change.id),
        verdict_file=str(run.outbox_verdict(n, job.id)),
        risks=risks(run, change.id),
    )
    return values


def risks(run: RunFolder, change: str) -> str:
    """What the reviewer is told to read as code beyond the task's files: the agent files the change edits."""
    try:
        files = read_model(run.change_record(change), Change, NotFoundError(change)).files
    except OrchError:
        return ""
    return agentfiles.risk_note(files)


def first_added_line(patch: str) -> tuple[str, int, str] | None:
    """(file, line, text) of the first non-blank line the patch adds, in the patched file's numbering."""
    path: str | None = None
    line = 0
    for raw in patch.splitlines():
        if raw.startswith("+++ "):
            target = raw[4:].strip()
            path = target[2:] if target.startswith("b/") else None
            continue
        hunk = HUNK_RE.match(raw)
        if hunk:
            line = int(hunk.group(1))
            continue
        if path is None or not line or raw.startswith(("---", "\\")):
            continue
        if raw.startswith("+"):
            if raw[1:].strip():
                return path, line, raw[1:].strip()
            line += 1
        elif raw.startswith(" "):
            line += 1
    return None


def offline_claim(run: RunFolder, change: ChangeBook) -> Finding:
    """What the offline reviewer checks of a change: the first line it adds is in its checkout."""
    try:
        patch = run.change_patch(change.id).read_text(encoding="utf-8", errors="replace")
    except OSError:
        patch = ""
    file, line, quote = first_added_line(patch) or ("(no added line)", 1, "(the change adds no line)")
    claim = f"change {change.id} does what task {change.task} asks"
    return Finding(
        id="C", claim=claim, severity=Severity.INFO, evidence=[CodeEvidence(file=file, line=line, quote=quote)]
    )


def offline_record(spec: FleetSpec, run: RunFolder, change: str) -> str:
    """The record the offline reviewer's verdict rests on: the checks as the gate ran them on the change's tree
    (the writer's code never runs as the reviewer)."""
    return str(run.change_checks(change)) if spec.checks else verdictwriter.NO_RECORD


def gate_run(run: RunFolder, change: str) -> RanCommand | None:
    """The spec's checks as the gate ran them on the change's tree (checks.json), as one call that ran them joined
    with `&&`, which a reviewer may cite as run (the offline one does: orch.lead.verdictwriter.outcome); None: no
    record."""
    try:
        record = json.loads(run.change_checks(change).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    command, code, _, _ = verdictwriter.outcome(record if isinstance(record, dict) else None)
    return RanCommand(command, is_error=code != 0) if command and code is not None else None


def offline_review_steps(
    spec: FleetSpec, run: RunFolder, change: ChangeBook, values: dict[str, str]
) -> list[ScriptStep]:
    custom = spec.roles.get(Role.REVIEWER)
    if custom is not None and custom.offline_script is not None:
        return render_steps(custom.offline_script, values)
    values = {**values, "finding_id": change.id}
    return [
        {"bash": briefs.verification_check(offline_claim(run, change), values, offline_record(spec, run, change.id))},
        {"bash": f"touch {shlex.quote(values['done_file'])}"},
        {"reply": "Review written."},
    ]

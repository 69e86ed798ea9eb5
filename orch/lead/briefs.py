"""Briefs and messages the controller sends: neutral, explicit about where results go, never a lie.

A brief is the role's template filled in for one job (orch.fleet.talk.brief then appends the worker
protocol: result file, done flag, bus, autonomy). Offline runs append an orch-script block: the
scripted model makes the real agent execute those steps. For verification jobs the offline steps are
generated here: the worker greps the cited quote, and `orch offline-verdict` (orch.lead.verdictwriter) writes the
verdict from what the grep found and from orch's own run of the finding's `reproduce` command
(orch.lead.reproduce), so no worker runs another's command.

Messages sent later (corrections, nudges, restarts) never name an absolute `*.md` path: the scripted
model would take that as a new brief and start its script again.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from orch import escape
from orch.jobs.findings import CodeEvidence, Finding, Problem, Reproduction
from orch.jobs.state import AcceptedFinding, ControllerState, Job, Stance
from orch.lead import verdictwriter
from orch.run import workerprotocol
from orch.run.folder import RunFolder
from orch.spec.model import FleetSpec, Role, ScriptStep, TaskSpec
from orch.spec.placeholders import render, render_steps, script_block

OUTPUT_LINES = 12
"""The last lines of orch's run of a reproduce command a verifier's brief shows."""
STANCES = {
    Stance.VERIFY: (
        "Determine whether this claim holds. Try to refute it first: look for the input, path or guard "
        "that would make it false. Confirm it only if it survives your attempt."
    ),
    Stance.REFUTE: (
        "Round 2 of 3: try to refute this claim. Look for the input, path or guard that makes it false. "
        "If you cannot refute it, say whether it holds."
    ),
    Stance.CONFIRM: (
        "Round 3 of 3: this claim survived a round of refutation attempts. Check independently whether "
        "it holds, and confirm it only with evidence you gathered yourself."
    ),
}


def _values(run: RunFolder, state: ControllerState, job: Job, n: int, workdir: Path, workers: int) -> dict[str, str]:
    return {
        "job": state.token(job.id),
        "job_id": job.id,
        "run": run.name,
        "run_dir": str(run.root),
        "worker": str(n),
        "workers": str(workers),
        "workdir": str(workdir),
        "result_file": str(run.result(n)),
        "done_file": str(run.done(n)),
    }


def job_values(run: RunFolder, state: ControllerState, job: Job, n: int, workdir: Path, workers: int) -> dict[str, str]:
    """The values every brief has (its job, run, worker, workdir, result and done files)."""
    return _values(run, state, job, n, workdir, workers)


def evidence_lines(evidence: Sequence[CodeEvidence]) -> str:
    return "\n".join(f"- {ev.cite()}: `{' '.join(ev.quote.split())}`" for ev in evidence) or "- (none)"


def confirmed_list(findings: Sequence[AcceptedFinding]) -> str:
    if not findings:
        return "- (none: no finding was confirmed)"
    lines = []
    for item in findings:
        f = item.finding
        cites = ", ".join(ev.cite() for ev in f.evidence)
        lines.append(f"- {item.id} ({f.severity.value}): {f.claim} [{cites}]")
    return "\n".join(lines)


def task_values(
    run: RunFolder,
    state: ControllerState,
    job: Job,
    task: TaskSpec,
    n: int,
    workdir: Path,
    workers: int,
    confirmed: Sequence[AcceptedFinding],
) -> dict[str, str]:
    values = _values(run, state, job, n, workdir, workers)
    values.update(
        task_id=job.task or job.id,
        title=task.title or task.goal.splitlines()[0][:80],
        goal=task.goal.strip(),
        files=", ".join(task.files) or "anywhere in the workdir",
    )
    if task.role is Role.FINDER:
        values["findings_file"] = str(run.outbox_findings(n, job.id))
    else:
        values["confirmed_findings"] = confirmed_list(confirmed)
    return values


def verify_values(
    run: RunFolder, state: ControllerState, job: Job, n: int, workdir: Path, workers: int
) -> dict[str, str]:
    assert job.finding is not None and job.stance is not None
    item = state.finding(job.finding)
    values = _values(run, state, job, n, workdir, workers)
    values.update(
        finding_id=item.id,
        claim=item.finding.claim,
        severity=item.finding.severity.value,
        evidence=evidence_lines(item.finding.evidence),
        reproduce=escape.markdown_code(item.finding.reproduce) if item.finding.reproduce else "(none)",
        reproduced=reproduced_text(item.reproduced),
        round=str(job.round),
        stance=STANCES[job.stance],
        verdict_file=str(run.outbox_verdict(n, job.id)),
    )
    return values


def reproduced_text(run: Reproduction | None) -> str:
    """What the verifier is told of orch's run of the reproduce command: its outcome and its output's last lines,
    and that it may cite it as run."""
    if run is None:
        return "orch ran no command for this finding."
    if run.exit_code is None:
        why = run.error or "it did not end within verification.reproduce_timeout"
        return f"orch could not get an exit code from it ({escape.one_line(why)}): judge the claim without it."
    tail = "\n".join(f"    {line}" for line in escape.terminal_text(run.output).splitlines()[-OUTPUT_LINES:])
    return (
        # No duration: a brief is the same in every run of the spec, and a replay's briefs are the recording's.
        f"orch ran it in its sandbox (no network, a copy of this tree): exit {run.exit_code}. "
        "You may cite that as evidence you ran, with that exit code. It is another worker's command: running it "
        "yourself runs it as you. Its output ended with:\n" + (tail or "    (no output)")
    )


def brief_text(spec: FleetSpec, role: Role, values: dict[str, str], steps: Sequence[ScriptStep] | None) -> str:
    text = render(spec.template(role), values).rstrip() + "\n"
    if spec.offline and steps is not None:
        text += "\n## Offline rehearsal\nThe scripted model runs these steps:\n\n" + script_block(steps)
    return text


def offline_task_steps(spec: FleetSpec, task: TaskSpec, values: dict[str, str]) -> list[ScriptStep]:
    custom = task.offline_script or _role_script(spec, task.role)
    if custom is not None:
        return render_steps(custom, values)
    if task.role is Role.FINDER:
        findings = '{"job": "' + values["job"] + '", "findings": []}'
        summary = "Offline rehearsal: no model reasoned about this task, so no findings are reported.\n"
        return [
            {"write": values["findings_file"], "content": findings},
            {"write": values["result_file"], "content": summary},
            {"bash": f"touch {shlex.quote(values['done_file'])}"},
            {"reply": "Finished."},
        ]
    summary = f"Offline rehearsal of job {values['job_id']}: no change made.\n\n{values['confirmed_findings']}\n"
    return [
        {"write": values["result_file"], "content": summary},
        {"bash": f"touch {shlex.quote(values['done_file'])}"},
        {"reply": "Finished."},
    ]


def offline_verify_steps(spec: FleetSpec, finding: Finding, values: dict[str, str], record: str) -> list[ScriptStep]:
    custom = _role_script(spec, Role.VERIFIER)
    if custom is not None:
        return render_steps(custom, values)
    return [
        {"bash": verification_check(finding, values, record)},
        {"bash": f"touch {shlex.quote(values['done_file'])}"},
        {"reply": "Verdict written."},
    ]


def verification_check(finding: Finding, values: dict[str, str], record: str) -> str:
    """The shell the offline verifier (or reviewer) runs in one call: grep the quote, and write the verdict from what
    it found and orch's `record` of the finding's command (orch.lead.verdictwriter; `-`: none) with `orch
    offline-verdict`. The worker never runs the command itself: orch did, in the checks' sandbox. Every line stays
    short: an agent may cut a long line of its brief (Gemini CLI's read_file stops at 2000 characters)."""
    q = shlex.quote
    ev = finding.evidence[0]
    first_line = next((ln.strip() for ln in ev.quote.splitlines() if ln.strip()), ev.quote.strip())
    args = [record, values["verdict_file"], values["result_file"], values["job"], values["finding_id"], ev.file]
    args += [str(ev.line), first_line]
    return "\n".join(
        [
            f"cd {q(values['workdir'])} || exit 1",
            f"if {verdictwriter.grep_command(ev.file, first_line)}; then found=1; else found=0; fi",
            f'orch {verdictwriter.COMMAND} "$found" ' + " ".join(q(a) for a in args),
        ]
    )


def _role_script(spec: FleetSpec, role: Role) -> list[ScriptStep] | None:
    custom = spec.roles.get(role)
    return custom.offline_script if custom is not None else None


# --- messages after the brief ------------------------------------------------------------------
def _where(run: RunFolder, n: int) -> str:
    return f"the result file ({run.result(n).name} in {run.root})"


def correction_text(run: RunFolder, job: Job, n: int, problems: Sequence[Problem], attempt: int, limit: int) -> str:
    listing = "\n".join(f"- {p.detail}" for p in problems)
    return (
        f"orch: job {job.id} is not accepted yet (correction {attempt} of {limit}). What is wrong:\n"
        f"{listing}\n"
        f"Fix exactly these, keep {_where(run, n)} up to date, then create the done flag {run.done(n)} "
        "again. Work autonomously."
    )


def nudge_text(run: RunFolder, job: Job, n: int) -> str:
    text = (
        f"orch: job {job.id} is not finished: there is no done flag at {run.done(n)}. Continue working "
        f"autonomously; when you are finished, write {_where(run, n)} and then create the done flag."
    )
    if job.problems:
        text += " Still wrong from before:\n" + "\n".join(f"- {p.detail}" for p in job.problems)
    return text


PERMISSION_DENIED = (
    "orch: this run's permission policy refused that tool call (nobody can approve prompts in an unattended run). "
    "Do not retry it; carry on with the tools you are allowed to use."
)


def permission_wait_text(run: RunFolder, n: int, tool: str) -> str:
    return (
        f"orch: worker {n} waits on a permission prompt ({tool}); policy report: answer it with "
        f"`orch attach {run.name} --write`"
    )


def continue_text(job: Job, reason: str) -> str:
    return (
        f"orch: the model API was unavailable ({reason}); it should be back. Continue job {job.id} where you left off."
    )


def restart_prompt(run: RunFolder, job: Job, n: int, why: str) -> str:
    return (
        f"orch restarted you ({why}). You are on job {job.id}. {workerprotocol.pointer_text(run, n)} "
        "Check what you already did before redoing it."
    )

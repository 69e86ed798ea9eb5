"""The verified result of a run: report.json (the model), report.md and a single-file report.html.

The heart is the verification matrix: one row per claim, one column per worker, each cell the
verdict(s) that worker gave (or "finder"). Per worker: cost (from its status line), busy time, jobs,
rejected outputs, and a link to its transcript.
"""

from __future__ import annotations

import datetime as dt
import html

from pydantic import Field

from orch.lead.findings import CodeEvidence, CommandEvidence, Evidence
from orch.lead.jobs import ControllerState, FindingStatus, Job, JobStatus
from orch.lead.spec import FleetSpec
from orch.lead.verification import finding_status
from orch.run.folder import RunFolder, atomic_write
from orch.run.records import Strict
from orch.text import shorten


class VerdictCell(Strict):
    job: str
    verifier: int | None
    round: int
    stance: str
    verdict: str
    """CONFIRMED, REFUTED, UNVERIFIABLE, or INVALID (output rejected until the job failed), FAILED,
    CANCELLED, PENDING."""
    reason: str = ""
    evidence: list[str] = Field(default_factory=list)
    flags: list[str] = Field(default_factory=list)
    """Rejected outputs of this verifier on this job (no evidence, false evidence, ...)."""


class FindingRow(Strict):
    id: str
    task: str
    finder: int
    claim: str
    severity: str
    evidence: list[str]
    reproduce: str | None
    status: FindingStatus
    verdicts: list[VerdictCell]


class WorkerRow(Strict):
    worker: int
    agent: str
    model: str | None
    cost_usd: float | None
    busy_seconds: float
    jobs: list[str]
    rejected_outputs: int
    restarts: int
    out: str | None
    transcript: str
    """Relative to the run folder."""


class JobRow(Strict):
    id: str
    role: str
    worker: int | None
    status: str
    seconds: float | None
    corrections: int
    nudges: int
    failure: str | None


class FlagRow(Strict):
    worker: int
    job: str
    role: str
    problems: list[str]


class RunReport(Strict):
    run: str
    workdir: str
    rounds: str
    offline: bool = False
    started: dt.datetime
    finished: dt.datetime | None
    seconds: float | None
    exit_code: int | None
    status: str
    reason: str
    workers: list[WorkerRow]
    findings: list[FindingRow]
    jobs: list[JobRow]
    flags: list[FlagRow]

    def verifier_columns(self) -> list[int]:
        return [w.worker for w in self.workers]


def _evidence(ev: Evidence) -> str:
    if isinstance(ev, CodeEvidence):
        return f"{ev.cite()}: {' '.join(ev.quote.split())}"
    assert isinstance(ev, CommandEvidence)
    return f"$ {ev.command} (exit {ev.exit_code})"


def _stamp(ts: float | None) -> dt.datetime | None:
    return dt.datetime.fromtimestamp(ts, dt.UTC) if ts is not None else None


def _cell(state: ControllerState, job: Job) -> VerdictCell:
    flags = [f"{p.kind.value}: {p.detail}" for flag in state.flags if flag.job == job.id for p in flag.problems]
    accepted = next((v for v in state.verdicts if v.job == job.id), None)
    if accepted is not None:
        verdict, reason = accepted.report.verdict.value, accepted.report.reason
        evidence = [_evidence(ev) for ev in accepted.report.evidence]
    else:
        verdict = {
            JobStatus.FAILED: "INVALID" if flags else "FAILED",
            JobStatus.CANCELLED: "CANCELLED",
        }.get(job.status, "PENDING")
        reason, evidence = job.failure or "", []
    return VerdictCell(
        job=job.id,
        verifier=job.worker,
        round=job.round,
        stance=job.stance.value if job.stance else "",
        verdict=verdict,
        reason=reason,
        evidence=evidence,
        flags=flags,
    )


def build_report(run: RunFolder, spec: FleetSpec, state: ControllerState) -> RunReport:
    findings = []
    for item in state.findings:
        cells = [_cell(state, j) for j in state.jobs_for(item.id)]
        findings.append(
            FindingRow(
                id=item.id,
                task=item.task,
                finder=item.finder,
                claim=item.finding.claim,
                severity=item.finding.severity.value,
                evidence=[_evidence(ev) for ev in item.finding.evidence],
                reproduce=item.finding.reproduce,
                status=finding_status(state, spec, item.id),
                verdicts=cells,
            )
        )
    workers = []
    for book in state.workers:
        mine = [j for j in state.jobs if j.worker == book.n]
        busy = sum((j.ended_at or state.finished or j.sent_at or 0) - j.sent_at for j in mine if j.sent_at)
        line = run.status_line_info(book.n)
        workers.append(
            WorkerRow(
                worker=book.n,
                agent=book.agent,
                model=book.model,
                cost_usd=line.cost_usd if line else None,
                busy_seconds=round(busy, 1),
                jobs=[j.id for j in mine],
                rejected_outputs=sum(1 for f in state.flags if f.worker == book.n),
                restarts=book.restarts,
                out=book.dead,
                transcript=str(run.log(book.n).relative_to(run.root)),
            )
        )
    jobs = [
        JobRow(
            id=j.id,
            role=j.role.value,
            worker=j.worker,
            status=j.status.value,
            seconds=round(j.ended_at - j.sent_at, 1) if j.ended_at and j.sent_at else None,
            corrections=j.corrections,
            nudges=j.nudges,
            failure=j.failure,
        )
        for j in state.jobs
    ]
    flags = [
        FlagRow(
            worker=f.worker, job=f.job, role=f.role.value, problems=[f"{p.kind.value}: {p.detail}" for p in f.problems]
        )
        for f in state.flags
    ]
    outcome = state.outcome
    return RunReport(
        run=state.run,
        workdir=run.info().workdir,
        rounds=spec.verification.rounds.value,
        offline=spec.offline,
        started=dt.datetime.fromtimestamp(state.started, dt.UTC),
        finished=_stamp(state.finished),
        seconds=round(state.finished - state.started, 1) if state.finished else None,
        exit_code=outcome.exit_code if outcome else None,
        status=outcome.status if outcome else "running",
        reason=outcome.reason if outcome else "",
        workers=workers,
        findings=findings,
        jobs=jobs,
        flags=flags,
    )


# --- the matrix --------------------------------------------------------------------------------
def matrix_cell(row: FindingRow, worker: int) -> str:
    if worker == row.finder:
        return "finder"
    cells = [c for c in row.verdicts if c.verifier == worker]
    if not cells:
        return "-"
    texts = []
    for c in cells:
        text = c.verdict + (" (flagged)" if c.flags and c.verdict not in ("INVALID",) else "")
        texts.append(f"r{c.round} {text}" if len({x.round for x in row.verdicts}) > 1 else text)
    return " / ".join(texts)


def matrix_text(report: RunReport, width: int = 44) -> str:
    """The verification matrix as a plain-text table (for the terminal)."""
    columns = report.verifier_columns()
    head = f"{'CLAIM':<{width}}  " + "  ".join(f"{'W' + str(n):<12}" for n in columns) + "  RESULT"
    lines = [head]
    for row in report.findings:
        claim = shorten(f"{row.id}: {row.claim}", width)
        cells = "  ".join(f"{matrix_cell(row, n)[:12]:<12}" for n in columns)
        lines.append(f"{claim:<{width}}  {cells}  {row.status.value}")
    if not report.findings:
        lines.append("(no findings)")
    return "\n".join(lines)


def _md(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


# Under the scripted model, Claude Code still prices the token counts it is sent back: a cost is shown,
# none was paid.
OFFLINE_COST_NOTE = (
    "Offline run: no model API was called and nothing was billed; the costs are Claude Code's own estimate "
    "for the scripted model's token counts."
)


def render_markdown(report: RunReport) -> str:
    columns = report.verifier_columns()
    out = [
        f"# orch run {report.run}",
        "",
        f"**{report.status}** (exit {report.exit_code}): {report.reason}  ",
        f"Workdir `{report.workdir}`; verification `{report.rounds}`; "
        f"{report.seconds if report.seconds is not None else '?'} s.",
        "",
        "## Verification matrix",
        "",
        "| claim | " + " | ".join(f"W{n}" for n in columns) + " | result |",
        "|---|" + "---|" * len(columns) + "---|",
    ]
    for row in report.findings:
        cells = " | ".join(matrix_cell(row, n) for n in columns)
        out.append(f"| **{row.id}** {_md(row.claim)} | {cells} | **{row.status.value}** |")
    if not report.findings:
        out.append("| (no findings) |" + " |" * len(columns) + " |")
    out += ["", "## Findings", ""]
    for row in report.findings:
        out.append(f"### {row.id} — {row.status.value}")
        out.append(f"{_md(row.claim)} (severity {row.severity}, found by W{row.finder} in task {row.task})")
        out += [f"- evidence: `{_md(e)}`" for e in row.evidence]
        if row.reproduce:
            out.append(f"- reproduce: `{_md(row.reproduce)}`")
        for cell in row.verdicts:
            who = f"W{cell.verifier}" if cell.verifier else "-"
            out.append(f"- {cell.job} ({cell.stance}, {who}): **{cell.verdict}** {_md(cell.reason)}")
            out += [f"  - evidence: `{_md(e)}`" for e in cell.evidence]
            out += [f"  - flagged: {_md(f)}" for f in cell.flags]
        out.append("")
    out += ["## Workers", ""]
    if report.offline:
        out += [OFFLINE_COST_NOTE, ""]
    out += [
        "| worker | agent | model | cost | busy | jobs | rejected outputs | restarts | transcript |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for w in report.workers:
        cost = f"${w.cost_usd:.4f}" if w.cost_usd is not None else "-"
        out.append(
            f"| W{w.worker}{' (out: ' + _md(w.out) + ')' if w.out else ''} | {w.agent} | {w.model or '-'} | {cost} "
            f"| {w.busy_seconds:g} s | {', '.join(w.jobs) or '-'} | {w.rejected_outputs} | {w.restarts} "
            f"| [{w.transcript}]({w.transcript}) |"
        )
    out += ["", "## Jobs", "", "| job | role | worker | status | seconds | corrections | nudges | failure |"]
    out.append("|---|---|---|---|---|---|---|---|")
    for j in report.jobs:
        out.append(
            f"| {j.id} | {j.role} | {j.worker or '-'} | {j.status} | {j.seconds if j.seconds is not None else '-'} "
            f"| {j.corrections} | {j.nudges} | {_md(j.failure or '')} |"
        )
    if report.flags:
        out += ["", "## Rejected outputs", ""]
        for f in report.flags:
            out.append(f"- W{f.worker} on {f.job} ({f.role}): " + "; ".join(_md(p) for p in f.problems))
    return "\n".join(out) + "\n"


CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1100px;
color:#1d1d1f;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;width:100%;margin:.5em 0}
td,th{border:1px solid #ddd;padding:.35em .5em;vertical-align:top;text-align:left}
th{background:#f5f5f7}code{font:12px ui-monospace,Menlo,monospace;background:#f5f5f7;padding:0 .2em}
.CONFIRMED{background:#dff5e1}.REFUTED{background:#fde2e1}.UNVERIFIABLE,.UNVERIFIED,.PENDING{background:#fff4d6}
.INVALID,.FAILED,.CANCELLED{background:#eee;color:#900}.finder{color:#888;font-style:italic}
.status{font-weight:bold;padding:.1em .5em;border-radius:4px}.flag{color:#900;font-size:.9em}
ul{margin:.2em 0 .2em 1.2em;padding:0}
""".strip()


def _h(text: object) -> str:
    return html.escape(str(text))


def _matrix_class(text: str) -> str:
    for word in ("CONFIRMED", "REFUTED", "UNVERIFIABLE", "INVALID", "FAILED", "CANCELLED", "PENDING"):
        if word in text:
            return word
    return "finder" if text == "finder" else ""


def render_html(report: RunReport) -> str:
    columns = report.verifier_columns()
    status_class = {"passed": "CONFIRMED", "not-confirmed": "UNVERIFIED", "failed": "FAILED"}.get(report.status, "")
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>orch run {_h(report.run)}</title><style>{CSS}</style></head><body>",
        f"<h1>orch run {_h(report.run)}</h1>",
        f"<p><span class='status {status_class}'>{_h(report.status)}</span> exit {_h(report.exit_code)}: "
        f"{_h(report.reason)}</p>",
        f"<p>Workdir <code>{_h(report.workdir)}</code>; verification <code>{_h(report.rounds)}</code>; "
        f"{_h(report.seconds if report.seconds is not None else '?')} s.</p>",
        "<h2>Verification matrix</h2><table><tr><th>claim</th>",
        *(f"<th>W{n}</th>" for n in columns),
        "<th>result</th></tr>",
    ]
    for row in report.findings:
        parts.append(f"<tr><td><b>{_h(row.id)}</b> {_h(row.claim)}</td>")
        for n in columns:
            text = matrix_cell(row, n)
            parts.append(f"<td class='{_matrix_class(text)}'>{_h(text)}</td>")
        parts.append(f"<td class='{row.status.value}'><b>{_h(row.status.value)}</b></td></tr>")
    if not report.findings:
        parts.append(f"<tr><td colspan='{len(columns) + 2}'>(no findings)</td></tr>")
    parts.append("</table><h2>Findings</h2>")
    for row in report.findings:
        parts.append(f"<h3 id='{_h(row.id)}'>{_h(row.id)}: <span class='status {row.status.value}'>")
        parts.append(f"{_h(row.status.value)}</span></h3><p>{_h(row.claim)} ")
        parts.append(f"(severity {_h(row.severity)}, found by W{row.finder} in task {_h(row.task)})</p><ul>")
        parts += [f"<li>evidence: <code>{_h(e)}</code></li>" for e in row.evidence]
        if row.reproduce:
            parts.append(f"<li>reproduce: <code>{_h(row.reproduce)}</code></li>")
        parts.append("</ul><table><tr><th>job</th><th>verifier</th><th>verdict</th><th>reason and evidence</th></tr>")
        for cell in row.verdicts:
            who = f"W{cell.verifier}" if cell.verifier else "-"
            links = (
                f" <a href='verdicts/{_h(cell.job)}.json'>verdict</a> <a href='jobs/{_h(cell.job)}.task.md'>brief</a>"
            )
            details = "".join(f"<li><code>{_h(e)}</code></li>" for e in cell.evidence)
            details += "".join(f"<li class='flag'>flagged: {_h(f)}</li>" for f in cell.flags)
            parts.append(
                f"<tr><td>{_h(cell.job)} ({_h(cell.stance)}){links}</td><td>{who}</td>"
                f"<td class='{_h(cell.verdict)}'>{_h(cell.verdict)}</td>"
                f"<td>{_h(cell.reason)}<ul>{details}</ul></td></tr>"
            )
        parts.append("</table>")
    parts.append("<h2>Workers</h2>" + (f"<p>{_h(OFFLINE_COST_NOTE)}</p>" if report.offline else ""))
    parts.append(
        "<table><tr><th>worker</th><th>agent / model</th><th>cost</th><th>busy</th>"
        "<th>jobs</th><th>rejected outputs</th><th>restarts</th><th>transcript</th></tr>"
    )
    for w in report.workers:
        cost = f"${w.cost_usd:.4f}" if w.cost_usd is not None else "-"
        out = f" <span class='flag'>out: {_h(w.out)}</span>" if w.out else ""
        parts.append(
            f"<tr><td>W{w.worker}{out}</td><td>{_h(w.agent)} / {_h(w.model or 'default')}</td><td>{cost}</td>"
            f"<td>{w.busy_seconds:g} s</td><td>{_h(', '.join(w.jobs) or '-')}</td><td>{w.rejected_outputs}</td>"
            f"<td>{w.restarts}</td><td><a href='{_h(w.transcript)}'>{_h(w.transcript)}</a></td></tr>"
        )
    parts.append(
        "</table><h2>Jobs</h2><table><tr><th>job</th><th>role</th><th>worker</th><th>status</th><th>seconds</th>"
        "<th>corrections</th><th>nudges</th><th>failure</th></tr>"
    )
    for j in report.jobs:
        parts.append(
            f"<tr><td><a href='jobs/{_h(j.id)}.task.md'>{_h(j.id)}</a></td><td>{_h(j.role)}</td>"
            f"<td>{_h(j.worker or '-')}</td><td>{_h(j.status)}</td>"
            f"<td>{_h(j.seconds if j.seconds is not None else '-')}</td>"
            f"<td>{j.corrections}</td><td>{j.nudges}</td><td>{_h(j.failure or '')}</td></tr>"
        )
    parts.append("</table>")
    if report.flags:
        parts.append("<h2>Rejected outputs</h2><ul>")
        parts += [
            f"<li>W{f.worker} on {_h(f.job)} ({_h(f.role)}): {_h('; '.join(f.problems))}</li>" for f in report.flags
        ]
        parts.append("</ul>")
    parts.append("</body></html>\n")
    return "".join(parts)


def write_reports(run: RunFolder, spec: FleetSpec, state: ControllerState) -> RunReport:
    report = build_report(run, spec, state)
    atomic_write(run.report_json, report.model_dump_json(indent=2) + "\n")
    atomic_write(run.report_md, render_markdown(report))
    atomic_write(run.report_html, render_html(report))
    return report


def load_report(run: RunFolder) -> RunReport:
    return RunReport.model_validate_json(run.report_json.read_text())

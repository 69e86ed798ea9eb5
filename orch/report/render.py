"""The run's report rendered: the verification matrix as text (for the terminal), report.md and a
single-file report.html, written with report.json into the run folder. The model is orch.report.model."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from markupsafe import Markup

from orch.errors import UsageError
from orch.exitcodes import Exit, status_of
from orch.gateway.modeldir import unbilled
from orch.jobs.state import ControllerState
from orch.report.changes import change_status, changes_markdown
from orch.report.charts import cost_svg, timeline_svg
from orch.report.junit import render_junit
from orch.report.model import ISOLATION_NOTES, FindingRow, RunReport, Usage, build_report
from orch.report.sarif.render import render_sarif
from orch.report.templates.environment import render
from orch.run.files import atomic_write_all
from orch.run.folder import RELATIVE, RunFolder
from orch.run.records import Isolation
from orch.run.terminal import write_transcripts
from orch.spec.model import FleetSpec
from orch.text import clean

log = logging.getLogger(__name__)


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
    head = f"{'CLAIM':<{width}}  " + "  ".join(f"{column(report, n)[:12]:<12}" for n in columns) + "  RESULT"
    lines = [head]
    for row in report.findings:
        claim = clean(f"{row.id}: {row.claim}", width)  # the terminal's: no escape a worker wrote
        cells = "  ".join(f"{matrix_cell(row, n)[:12]:<12}" for n in columns)
        lines.append(f"{claim:<{width}}  {cells}  {row.status.value}")
    if not report.findings:
        lines.append("(no findings)")
    return "\n".join(lines)


def outcome_line(report: RunReport) -> str:
    """`run demo: passed (exit 0): all tasks done; ...`: the run's banner on the terminal."""
    return f"run {report.run}: {report.status} (exit {report.exit_code}): {clean(report.reason, 2000)}"


def _md(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def cost_note(report: RunReport) -> str | None:
    """What the costs are: billed, priced but not billed (offline, replayed), or an agent's estimate."""
    if report.cost_source == "gateway":
        priced = f"priced by orch's model gateway from the API's usage fields ({report.pricing})"
        if report.billed:
            return f"Tokens and costs as {priced}."
        why = "replayed a recording" if report.replay_of else "was offline (orch's scripted model answered)"
        return (
            f"Nothing was billed: this run {why}, so no model API charged anything. The costs are what the "
            f"price table ({report.pricing}) would charge for these token counts."
        )
    if report.offline:
        # Under the scripted model Claude Code still prices the token counts it is sent back.
        return (
            "Nothing was billed: this run was offline (orch's scripted model answered). It had no model "
            "gateway, so the costs are the agents' own estimate for the scripted token counts."
        )
    return "This run had no model gateway: the costs are what each agent's status line reported (no token counts)."


def evidence_note(report: RunReport) -> str | None:
    if report.evidence_source == "ledger":
        return None
    return (
        "Evidence check: this run had no model gateway, so cited commands were checked against the workers' "
        "hook logs, which the workers themselves can write."
    )


def usage_rows(report: RunReport) -> list[tuple[str, Usage]]:
    """Usage by worker, by model, by job and in total (gateway runs), as labelled rows."""
    rows = [(f"W{w.worker}", w.usage) for w in report.workers if w.usage is not None]
    rows += [(f"model {m.model}", m.usage) for m in report.models]
    rows += [(f"job {j.id}", j.usage) for j in report.jobs if j.usage is not None and j.usage.requests]
    if report.total is not None:
        rows.append(("total", report.total))
    return rows


def usage_heads(report: RunReport) -> tuple[str, ...]:
    return ("", "requests", "input", "output", "cache read", "cache write", cost_head(report))


def usage_cells(usage: Usage) -> tuple[str, ...]:
    return (
        str(usage.requests),
        str(usage.input_tokens),
        str(usage.output_tokens),
        str(usage.cache_read_tokens),
        str(usage.cache_write_tokens),
        f"${usage.cost_usd:.4f}",
    )


def _unbilled(report: RunReport) -> str | None:
    return unbilled(report.billed, report.offline, report.replay_of is not None)


def cost_line(report: RunReport) -> str:
    """One line: the run's tokens and cost, and beside it whether anything was billed (the terminal, the heads
    of report.md and report.html)."""
    why = _unbilled(report)
    said = f"nothing billed ({why})" if why else "billed"
    if report.total is not None:
        return f"cost: ${report.total.cost_usd:.4f} for {_tokens(report.total)} tokens, {said}"
    costs = [w.cost_usd for w in report.workers if w.cost_usd is not None]
    if not costs:
        return "cost: unknown" + (f", nothing billed ({why})" if why else "")
    estimate = f"cost: ${sum(costs):.4f} (the agents' own estimate; no model gateway)"
    return estimate + (f", nothing billed ({why})" if why else "")


def cost_head(report: RunReport) -> str:
    """The cost column's head: it says "nothing billed" where the run billed nothing."""
    return "cost (nothing billed)" if _unbilled(report) else "cost"


def _tokens(usage: Usage) -> int:
    return usage.input_tokens + usage.output_tokens + usage.cache_read_tokens + usage.cache_write_tokens


def column(report: RunReport, n: int) -> str:
    """Worker n's column head: `W3`, or in a mixed fleet `W3 codex`."""
    if report.confirmed_across_kinds is None:
        return f"W{n}"
    return f"W{n} " + next((w.agent for w in report.workers if w.worker == n), "?")


def across_note(report: RunReport) -> str:
    confirmed = sum(1 for row in report.findings if row.status.value == "CONFIRMED")
    return f"Confirmed across agent kinds: {report.confirmed_across_kinds} of {confirmed} confirmed finding(s)."


def render_markdown(report: RunReport) -> str:
    columns = report.verifier_columns()
    out = [
        f"# orch run {report.run}",
        "",
        f"**{report.status}** (exit {report.exit_code}): {_md(report.reason)}  ",
        f"Workdir `{report.workdir}`; verification `{report.rounds}`; "
        f"{report.seconds if report.seconds is not None else '?'} s; {cost_line(report)}.",
        *([across_note(report)] if report.confirmed_across_kinds is not None else []),
        "",
        "## Verification matrix",
        "",
        "| claim | " + " | ".join(column(report, n) for n in columns) + " | result |",
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
    notes = [n for n in (cost_note(report), evidence_note(report)) if n]
    for note in notes:
        out += [note, ""]
    out += [
        f"| worker | agent | model | {cost_head(report)} | busy | jobs | rejected outputs | restarts | transcript |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for w in report.workers:
        cost = f"${w.cost_usd:.4f}" if w.cost_usd is not None else "-"
        out.append(
            f"| W{w.worker}{' (out: ' + _md(w.out) + ')' if w.out else ''} | {w.agent} | {w.model or '-'} | {cost} "
            f"| {w.busy_seconds:g} s | {', '.join(w.jobs) or '-'} | {w.rejected_outputs} | {w.restarts} "
            f"| [{w.transcript}]({w.transcript}) |"
        )
    usage = usage_rows(report)
    if usage:
        heads = usage_heads(report)
        out += ["", "## Tokens and cost", "", "| " + " | ".join(heads) + " |", "|---" * len(heads) + "|"]
        out += [f"| {label} | " + " | ".join(usage_cells(u)) + " |" for label, u in usage]
    out += ["", "## Jobs", "", "| job | role | worker | status | seconds | corrections | nudges | failure |"]
    out.append("|---|---|---|---|---|---|---|---|")
    for j in report.jobs:
        out.append(
            f"| {j.id} | {j.role} | {j.worker or '-'} | {j.status} | {j.seconds if j.seconds is not None else '-'} "
            f"| {j.corrections} | {j.nudges} | {_md(j.failure or '')} |"
        )
    out += changes_markdown(report.changes)
    if report.flags:
        out += ["", "## Rejected outputs", ""]
        for f in report.flags:
            out.append(f"- W{f.worker} on {f.job} ({f.role}): " + "; ".join(_md(p) for p in f.problems))
    out += ["", "## Isolation", "", _md(ISOLATION_NOTES[Isolation(report.isolation)])]
    out += ["", _md(report.caps), ""] if report.caps else []
    out += [f"- {a.kind}: W{a.worker or '?'} on {a.job or '-'}: {_md(a.detail)}" for a in report.attempts]
    if report.agent_limits:
        out += ["", "## Agent limits", ""]
        out += [f"- {kind}: " + "; ".join(_md(c) for c in limits) for kind, limits in report.agent_limits.items()]
    return "\n".join(out) + "\n"


def _matrix_class(text: str) -> str:
    for word in ("CONFIRMED", "REFUTED", "UNVERIFIABLE", "INVALID", "FAILED", "CANCELLED", "PENDING"):
        if word in text:
            return word
    return "finder" if text == "finder" else ""


def charts_svg(report: RunReport) -> tuple[str, str]:
    """The jobs as bars over time and each worker's cost over time (inline SVG), when the report has them."""
    if not report.timeline:
        return "", ""
    start = report.started.timestamp()
    ends = [b.end for b in report.timeline if b.end is not None] + [p.ts for ps in report.costs.values() for p in ps]
    end = report.finished.timestamp() if report.finished else max(ends, default=start + 1)
    timeline = timeline_svg(report.timeline, len(report.workers), start, end)
    return timeline, cost_svg(report.costs, start, end) if report.costs else ""


class JobFile(NamedTuple):
    """RunFolder's relative name for a job's file, as the text before and after the job id: the template
    prints head, job, tail (a Path, or a dict of every job's links, per link was most of a big page's time)."""

    head: str
    tail: str


_JOB = "\x00job\x00"  # a marker: where the job id goes in the name RunFolder gives its file


def job_file(path: Callable[[str], Path]) -> JobFile:
    head, _, tail = path(_JOB).as_posix().partition(_JOB)
    return JobFile(head, tail)


HTML = "report/report.html"
STATUS_CLASSES = {
    status_of(Exit.PASSED): "CONFIRMED",
    status_of(Exit.FINDINGS): "REFUTED",
    status_of(Exit.INCOMPLETE): "UNVERIFIED",
    status_of(Exit.FAILED): "FAILED",
}
"""The run's status in report.html's colours: green for a run that went as designed."""


def render_html(report: RunReport) -> str:
    """report.html, from orch/data/report/report.html (Jinja2, autoescaped: a worker's text stays text)."""
    return render(HTML, **html_context(report))


def html_context(report: RunReport) -> dict[str, Any]:
    """What report.html's template is given. What takes a function call is worked out here: a call from a
    template costs several times one from Python."""
    timeline, costs = charts_svg(report)
    columns = report.verifier_columns()
    matrix = [(row, [(text, _matrix_class(text)) for text in (matrix_cell(row, n) for n in columns)])
              for row in report.findings]  # fmt: skip
    return dict(
        report=report,
        columns=columns,
        matrix=matrix,
        status_class=STATUS_CLASSES.get(report.status, ""),
        cost=cost_line(report),
        cost_head=cost_head(report),
        change_status=change_status,
        verdict=job_file(RELATIVE.verdict_file),  # report.html sits in the run folder: links are relative
        brief=job_file(RELATIVE.job_brief),
        patch=job_file(RELATIVE.change_patch),
        timeline=Markup(timeline),  # rendered from orch/data/charts/, autoescaped
        costs=Markup(costs),
        notes=[n for n in (cost_note(report), evidence_note(report)) if n],
        usage=[(label, usage_cells(u)) for label, u in usage_rows(report)],
        usage_heads=usage_heads(report),
        isolation=ISOLATION_NOTES[Isolation(report.isolation)],
    )


def write_reports(run: RunFolder, spec: FleetSpec, state: ControllerState) -> RunReport:
    """report.json, .md, .html, .sarif and .junit.xml, all or none (each as it was before when one cannot
    be written)."""
    report = build_report(run, spec, state)
    try:
        write_transcripts(run, [w.worker for w in report.workers])  # the readable transcripts the report links
    except OSError as exc:
        log.warning("run %s: a transcript could not be written: %s", run.name, exc)
    files = {
        run.report_json: report.model_dump_json(indent=2) + "\n",
        run.report_md: render_markdown(report),
        run.report_html: render_html(report),
        run.report_sarif: render_sarif(report),
        run.report_junit: render_junit(report),
    }
    try:
        atomic_write_all(files)
    except OSError as exc:
        where = exc.filename or run.root
        raise UsageError(
            f"cannot write the reports of run {run.name}: {where}: {exc.strerror or exc}",
            hint=f"make {run.root} writable, then `orch report {run.name}` writes them again",
        ) from None
    return report

"""A run of 1,000 findings' reports: the time to render and write report.html, report.md, report.sarif and
report.junit.xml, beside report.json for the same report (the ratios). No agents: the report is made in memory,
as big as a large run's."""

from __future__ import annotations

import datetime as dt
import statistics
import time
from collections.abc import Callable

from bench.core import Context, Result
from bench.table import Row
from orch.jobs.findings import CodeEvidence
from orch.jobs.state import FindingStatus
from orch.report.junit import render_junit
from orch.report.model import FindingRow, JobRow, RunReport, TaskRow, VerdictCell, WorkerRow
from orch.report.render import render_html, render_markdown
from orch.report.sarif.render import render_sarif
from orch.run.files import atomic_write
from orch.run.folder import RunFolder

FINDINGS = 1000
TASKS = 10
SAMPLES = 5  # per repeat; the repeat's figure is their median
STATUSES = (FindingStatus.CONFIRMED, FindingStatus.REFUTED, FindingStatus.UNVERIFIED)


def big_report(name: str, workdir: str, findings: int = FINDINGS) -> RunReport:
    """A finished run of three workers: `findings` findings over TASKS tasks, each with one quote and two
    verdicts with their reasons (a third refuted, a third unverified)."""
    started = dt.datetime(2026, 12, 5, tzinfo=dt.UTC)
    rows, jobs = (
        [],
        [
            JobRow(
                id=f"t{t}", role="finder", worker=1, status="done", seconds=60.0, corrections=0, nudges=0, failure=None
            )
            for t in range(TASKS)
        ],
    )
    for i in range(findings):
        task, fid = f"t{i % TASKS}", f"t{i % TASKS}-F{i // TASKS + 1}"
        status = STATUSES[i % len(STATUSES)]
        cells = []
        for n in (2, 3):
            verdict = (
                "REFUTED"
                if status is FindingStatus.REFUTED or (status is FindingStatus.UNVERIFIED and n == 3)
                else "CONFIRMED"
            )
            cells.append(
                VerdictCell(
                    job=f"{fid}.v{n}", verifier=n, round=2, stance="verify", verdict=verdict,
                    reason=f"ran the reproduce command for module_{i}.py: it exited 0, so the claim holds " * 2,
                    evidence=[f"$ python3 -m pytest tests/test_module_{i}.py -q (exit 0)"],
                )
            )  # fmt: skip
            jobs.append(JobRow(id=f"{fid}.v{n}", role="verifier", worker=n, status="done", seconds=20.0,
                               corrections=0, nudges=0, failure=None))  # fmt: skip
        quote = f"    return total / len(values_{i})"
        rows.append(
            FindingRow(
                id=fid, task=task, finder=1, severity=("critical", "high", "medium", "low", "info")[i % 5],
                claim=f"function_{i}() in module_{i}.py divides by the length of an empty list and raises "
                f"ZeroDivisionError when it is given no values; callers in the API layer pass such lists",
                evidence=[f"src/pkg/module_{i}.py:{10 + i % 400}: {quote.strip()}"],
                reproduce=f"python3 -c 'from pkg.module_{i} import function_{i}; function_{i}([])'",
                status=status, verdicts=cells, fails=status is FindingStatus.UNVERIFIED,
                locations=[CodeEvidence(file=f"src/pkg/module_{i}.py", line=10 + i % 400, quote=quote)],
            )
        )  # fmt: skip
    return RunReport(
        run=name, workdir=workdir, rounds="find-verify", offline=True, started=started,
        finished=started + dt.timedelta(minutes=30), seconds=1800.0, exit_code=4, status="incomplete",
        reason="some findings stayed unverified", findings=rows, jobs=jobs, flags=[],
        workers=[
            WorkerRow(worker=n, agent="claude", model=None, cost_usd=None, busy_seconds=1000.0, jobs=[],
                      rejected_outputs=0, restarts=0, out=None, transcript=f"logs/agent-{n}.log")
            for n in (1, 2, 3)
        ],
        tasks=[TaskRow(id=f"t{t}", role="finder", goal=f"determine whether module group {t} handles empty input")
               for t in range(TASKS)],
    )  # fmt: skip


def _ms(write: Callable[[], None]) -> float:
    start = time.perf_counter()
    write()
    return (time.perf_counter() - start) * 1000


def once(run: RunFolder, report: RunReport) -> dict[str, float]:
    """Median of SAMPLES of each write, interleaved so that load hits them alike."""
    writes: dict[str, Callable[[], None]] = {
        "sarif": lambda: atomic_write(run.report_sarif, render_sarif(report)),
        "junit": lambda: atomic_write(run.report_junit, render_junit(report)),
        "json": lambda: atomic_write(run.report_json, report.model_dump_json(indent=2) + "\n"),
        "md": lambda: atomic_write(run.report_md, render_markdown(report)),
        "html": lambda: atomic_write(run.report_html, render_html(report)),
    }
    times: dict[str, list[float]] = {key: [] for key in writes}
    for _ in range(SAMPLES):
        for key, write in writes.items():
            times[key].append(_ms(write))
    out = {key: statistics.median(values) for key, values in times.items()}
    out["both"] = out["sarif"] + out["junit"]
    out["ratio"] = out["both"] / out["json"] if out["json"] > 0 else 0.0
    out["html_json"] = out["html"] / out["json"] if out["json"] > 0 else 0.0
    return out


def run(ctx: Context) -> Result:
    run_folder = ctx.env.file_run("reports", workers=3)
    report = big_report(run_folder.name, run_folder.info().workdir)
    render_html(report)  # its template compiled before the first sample
    tries = [once(run_folder, report) for _ in range(ctx.config.repeat)]
    files = (run_folder.report_html, run_folder.report_md, run_folder.report_sarif, run_folder.report_junit,
             run_folder.report_json)  # fmt: skip
    sizes = {p.name: p.stat().st_size for p in files}
    size_note = ", ".join(f"{name} {size / 1e6:.1f} MB" for name, size in sizes.items())

    def values(key: str) -> list[float]:
        return [t[key] for t in tries]

    label = f"{FINDINGS:,} findings"
    rows = [
        Row("reports", f"report.html ({label}), written", "ms", values("html"), note=size_note),
        Row("reports", f"report.md ({label}), written", "ms", values("md")),
        Row("reports", f"report.sarif + report.junit.xml ({label}), written", "ms", values("both")),
        Row("reports", f"of which report.sarif ({label})", "ms", values("sarif")),
        Row("reports", f"of which report.junit.xml ({label})", "ms", values("junit")),
        Row("reports", f"report.json, the same report ({label})", "ms", values("json")),
        Row("reports", "report.html / report.json", "x", values("html_json")),
        Row("reports", "SARIF + JUnit / report.json", "x", values("ratio")),
    ]  # fmt: skip
    return Result(rows=rows, raw={"tries": tries, "sizes": sizes, "findings": FINDINGS, "samples": SAMPLES})

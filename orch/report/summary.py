"""`orch run --json`: the run's result as one JSON line for CI (docs/ci.md: the summary line; docs/outputs.md).

`RunSummary`: `run`, `exit_code`, `status` (passed, findings, incomplete, failed, stopped: orch/exitcodes.py),
`reason`, `findings` (a count per status: CONFIRMED, REFUTED, UNVERIFIED, pending), `jobs` (a count per status),
`fail_on`, `cost_usd`, `billed`, `unbilled` (why nothing was billed), `replay_of`, and `reports` (absolute paths
of the files written: html, md, json, sarif, junit).
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

from pydantic import Field

from orch.exitcodes import Exit, status_of
from orch.gateway.modeldir import unbilled
from orch.jobs.state import FindingStatus
from orch.report.model import RunReport
from orch.run.folder import RunFolder
from orch.run.records import Strict

STOPPED = "stopped"
"""The status of a run whose controller stopped before the end (exit 5): `orch run --resume` continues it."""


class RunSummary(Strict):
    """`orch run --json`'s line."""

    schema_version: Literal[2] = 2
    """2: `summary: 1` became `schema_version`, refuted findings pass, `fail_on` and `unbilled` came."""
    run: str
    """The run's name (its folder: `$ORCH_HOME/runs/NAME`)."""
    exit_code: int
    """`orch run`'s exit code (orch/exitcodes.py; docs/ci.md has the table)."""
    status: str
    """passed, findings, incomplete or failed (orch/exitcodes.py), or stopped (exit 5)."""
    reason: str
    """Why, in one line: the verdicts' tally, the findings at or above fail_on, what had no verdict, what failed."""
    findings: dict[str, int]
    """How many findings ended in each status (CONFIRMED, REFUTED and UNVERIFIED always listed)."""
    jobs: dict[str, int] = Field(default_factory=dict)
    """How many jobs ended in each status."""
    fail_on: str | None = None
    """Which CONFIRMED findings failed the run (never, or a severity and above)."""
    cost_usd: float | None = None
    """What the model traffic cost, as the run's gateway priced it; None without a gateway."""
    billed: bool | None = None
    """False: nothing was charged (offline, replayed); None: no gateway counted it."""
    unbilled: str | None = None
    """Why nothing was billed, to show beside the cost."""
    replay_of: str | None = None
    """The recording the run replayed."""
    reports: dict[str, str] = Field(default_factory=dict)
    """The report files the run folder holds (absolute paths), keyed html, md, json, sarif, junit."""
    where: str | None = None
    """Where its fleet ran: local, its container, its swarm node (the last life's)."""


class RunsSummary(Strict):
    """`orch run SPEC... [--repo PATH]... --json`'s line: several runs from one command (docs/fleet.md)."""

    schema_version: Literal[1] = 1
    exit_code: int
    """The worst of the runs' exit codes (failed, incomplete, findings, passed: docs/ci.md)."""
    runs: list[RunSummary]
    """Each run's summary, in the order the command named them (each spec over each repository)."""


def report_paths(run: RunFolder) -> dict[str, str]:
    """The report files the run folder holds, keyed html, md, json, sarif, junit."""
    files = {"html": run.report_html, "md": run.report_md, "json": run.report_json, "sarif": run.report_sarif,
             "junit": run.report_junit}  # fmt: skip
    return {key: str(path.resolve()) for key, path in files.items() if path.is_file()}


def summary(run: RunFolder, exit_code: int, report: RunReport | None, stopped: str | None = None) -> RunSummary:
    """`where`: the run's record's, when it has one."""
    findings = Counter({s.value: 0 for s in (FindingStatus.CONFIRMED, FindingStatus.REFUTED, FindingStatus.UNVERIFIED)})
    jobs: Counter[str] = Counter()
    if report is not None:
        findings.update(str(f.status.value) for f in report.findings)
        jobs.update(j.status for j in report.jobs)
    status = STOPPED if stopped else report.status if report is not None else status_of(Exit.FAILED)
    return RunSummary(
        run=run.name,
        exit_code=exit_code,
        status=status,
        reason=stopped or (report.reason if report is not None else "no report was written"),
        findings=dict(findings),
        jobs=dict(jobs),
        fail_on=report.fail_on.value if report is not None else None,
        cost_usd=round(report.total.cost_usd, 6) if report is not None and report.total is not None else None,
        billed=report.billed if report is not None else None,
        unbilled=unbilled(report.billed, report.offline, report.replay_of is not None) if report is not None else None,
        replay_of=report.replay_of if report is not None else None,
        reports=report_paths(run),
        where=run.info().where if run.run_json.is_file() else None,
    )

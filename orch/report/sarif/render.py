"""report.sarif: a run's findings as SARIF 2.1.0, the format code scanning (GitHub's and others') shows on the code.

Built from the report's model (orch.report.model) alone, so `orch report` rewrites it from report data:
- one result per finding, its rule the task that found it; its message the claim and how verification
  ended; its properties the verification status, each verifier's verdict and reason;
- its locations the finding's evidence: file (relative to the workdir), line and the quoted text;
- a fingerprint of the claim and the place (never the run or the finding id), so the same claim at the
  same place is one alert across runs rather than a new one each time;
- the level from the severity and the status (`level`): an UNVERIFIED finding is at most a warning;
- a REFUTED finding is a suppressed result, not an alert: verification caught a false positive, and the
  suppression's justification carries the verifiers' reasons (code scanning shows it closed).

Extension point: `SECTIONS`. Each section turns the report into rules and results: the findings, then
each writer task's change that did not land (REJECTED by the gate, CONFLICT, FAILED) at the files it touched;
a REJECTED one is suppressed too unless its task needed a change.
Worker-written text (claims, quotes, reasons) goes only into JSON strings, which json escapes; in a message it
passes `message_text` first (SARIF reads `[text](target)` in a message as a link: brackets are escaped).
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import PurePath, PurePosixPath
from typing import Literal
from urllib.parse import quote

from orch import __version__
from orch.exitcodes import Exit, status_of
from orch.jobs.changes import ChangeStatus
from orch.jobs.findings import CodeEvidence, Severity, Verdict
from orch.jobs.state import FindingStatus
from orch.report.model import FindingRow, RunReport
from orch.report.sarif.model import (
    ArtifactContent,
    ArtifactLocation,
    AutomationDetails,
    ChangeProperties,
    Driver,
    FindingProperties,
    Invocation,
    Level,
    Location,
    Message,
    PhysicalLocation,
    PropertyBag,
    Region,
    ReportingConfiguration,
    Result,
    Rule,
    Run,
    RunProperties,
    SarifLog,
    Suppression,
    Tool,
    Verifier,
)
from orch.run.folder import RELATIVE
from orch.text import shorten

INFORMATION_URI = "https://github.com/orch-dev/orch"
"""Where orch is described (SARIF wants an absolute URI for the tool). A placeholder until the project
has a public home: set it here, the one place that names it."""
REPORT = RELATIVE.report_html.as_posix()
SRCROOT = "%SRCROOT%"
"""The base of every location: the run's workdir (code scanning reads it as the checkout)."""
FINGERPRINT = "orchClaim/v1"
"""The partialFingerprints key; bump the version if what it hashes changes."""
SHORT = 120  # a rule's short description
EXECUTED = tuple(status_of(code) for code in (Exit.PASSED, Exit.FINDINGS, Exit.INCOMPLETE))
"""Outcomes of a run that went to its end (exit 0, 6 or 4): the tool ran, whatever it found."""
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Control characters a worker's text may carry (a terminal escape's ESC among them): never in a SARIF string."""
LINK_SYNTAX = re.compile(r"[\\\[\]]")

# (status, severity) -> level. A REFUTED finding is a note whatever its severity; an unverified (or
# still pending) one is at most a warning: only a CONFIRMED one is an error.
LEVELS: dict[FindingStatus, dict[Severity, Level]] = {
    FindingStatus.CONFIRMED: {
        Severity.CRITICAL: "error",
        Severity.HIGH: "error",
        Severity.MEDIUM: "warning",
        Severity.LOW: "note",
        Severity.INFO: "note",
    },
    FindingStatus.UNVERIFIED: {
        Severity.CRITICAL: "warning",
        Severity.HIGH: "warning",
        Severity.MEDIUM: "warning",
        Severity.LOW: "note",
        Severity.INFO: "note",
    },
    FindingStatus.REFUTED: {s: "note" for s in Severity},
}


def level(severity: str, status: FindingStatus) -> Level:
    """The SARIF level of a finding (an unknown severity counts as medium; a pending one as unverified)."""
    table = LEVELS.get(status, LEVELS[FindingStatus.UNVERIFIED])
    known = {s.value: s for s in Severity}
    return table[known.get(severity, Severity.MEDIUM)]


# --- sections: what the report contributes ------------------------------------------------------
@dataclass(frozen=True)
class Section:
    rules: Sequence[Rule]
    results: Sequence[Result]


def _squash(text: str) -> str:
    return " ".join(text.split())


def plain(text: str) -> str:
    """Worker text for a SARIF string that is not a message (a justification): no control characters."""
    return CONTROL.sub(" ", text)


def message_text(text: str) -> str:
    """Worker text for a SARIF message: no control characters, and `\\`, `[` and `]` escaped with a backslash
    (SARIF 2.1.0, 3.11.6: a message's `[text](target)` is a link, its escaped brackets literal), so a claim
    cannot link anywhere from code scanning's alert."""
    return LINK_SYNTAX.sub(lambda m: "\\" + m.group(), plain(text))


def _refuted_by(row: FindingRow) -> str:
    """A REFUTED finding's suppression: the verifiers who refuted it and why."""
    said = [f"W{c.verifier}: {_squash(c.reason)}" if c.reason else f"W{c.verifier}" for c in row.verdicts
            if c.verdict == Verdict.REFUTED.value]  # fmt: skip
    return plain("REFUTED by its verifiers: " + "; ".join(said))


def relative_path(file: str, workdir: str) -> str:
    """The evidence's file relative to the workdir, normalised (a path outside it stays absolute).
    String operations, not pathlib: this runs twice per finding."""
    path = posixpath.normpath(file)
    if path.startswith("/"):
        root = posixpath.normpath(workdir)
        if root == "/" or path.startswith(root + "/"):
            return path[len(root) :].lstrip("/")
    return path


def fingerprint(claim: str, evidence: CodeEvidence | None, workdir: str) -> str:
    """The same claim about the same code gives the same hash in every run: the claim (case and spacing
    ignored), the file relative to the workdir and the quoted text (so a claim whose code moved a few
    lines keeps its alert). Never the run's name, the finding's id or its verdicts."""
    parts = [_squash(claim).casefold().rstrip(".")]
    if evidence is not None:
        parts += [relative_path(evidence.file, workdir), _squash(evidence.quote)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def _location(ev: CodeEvidence, workdir: str) -> Location:
    path = relative_path(ev.file, workdir)
    inside = not path.startswith("/")
    artifact = ArtifactLocation(
        uri=quote(path, safe="/") if inside else PurePosixPath(path).as_uri(), uri_base_id=SRCROOT if inside else None
    )
    region = Region(start_line=ev.line, snippet=ArtifactContent(text=ev.quote))
    return Location(physical_location=PhysicalLocation(artifact_location=artifact, region=region))


def task_rule_id(task: str) -> str:
    return f"task/{task}"


def _verdicts(row: FindingRow) -> str:
    said = [f"W{c.verifier} {c.verdict}" for c in row.verdicts if c.verifier is not None]
    return f" ({'; '.join(said)})" if said else ""


def finding_section(report: RunReport) -> Section:
    """One result per finding; one rule per task (those that found nothing too, so code scanning can
    tell "ran and found nothing" from "did not run")."""
    agents = {w.worker: w.agent for w in report.workers}
    rules = [
        Rule(
            id=task_rule_id(t.id),
            name=t.id,
            short_description=Message(text=shorten(_squash(t.title or t.goal), SHORT)),
            full_description=Message(text=t.goal),
            default_configuration=ReportingConfiguration(level="warning"),
            properties=PropertyBag(tags=["orch", t.role]),
        )
        for t in report.tasks
    ]
    known = {t.id for t in report.tasks}
    for task in dict.fromkeys(f.task for f in report.findings if f.task not in known):  # a report without tasks
        rules.append(Rule(id=task_rule_id(task), name=task, short_description=Message(text=f"task {task}")))
    results = []
    for row in report.findings:
        status = FindingStatus(row.status)
        anchor = f"{REPORT}#{row.id}"
        verifiers = [
            Verifier(
                job=c.job,
                worker=c.verifier,
                agent=agents.get(c.verifier) if c.verifier is not None else None,
                round=c.round,
                stance=c.stance,
                verdict=c.verdict,
                reason=c.reason,
                flags=c.flags,
            )
            for c in row.verdicts
        ]
        text = f"{message_text(row.claim)}\n\nVerification: {status.value}{_verdicts(row)}. Report: {anchor}"
        refuted = status is FindingStatus.REFUTED
        results.append(
            Result(
                rule_id=task_rule_id(row.task),
                level=level(row.severity, status),
                message=Message(text=text),
                locations=[_location(ev, report.workdir) for ev in row.locations],
                partial_fingerprints={
                    FINGERPRINT: fingerprint(row.claim, row.locations[0] if row.locations else None, report.workdir)
                },
                suppressions=[Suppression(justification=_refuted_by(row))] if refuted else None,
                properties=FindingProperties(
                    tags=["orch", row.severity, status.value],
                    finding=row.id,
                    task=row.task,
                    severity=row.severity,
                    status=status.value,
                    finder=row.finder,
                    finder_agent=agents.get(row.finder),
                    verifiers=verifiers,
                    reproduce=row.reproduce,
                    report=anchor,
                ),
            )
        )
    return Section(rules=rules, results=results)


CHANGE_LEVELS: dict[ChangeStatus, Level] = {
    # REJECTED: the gate refused it (the checks regressed, it left its scope, or a review broke it).
    ChangeStatus.REJECTED: "warning",
    ChangeStatus.CONFLICT: "note",
    ChangeStatus.FAILED: "note",
}


def change_section(report: RunReport) -> Section:
    """One result per writer task whose change did not land, at the files it touched (its rule: the task's).
    The fingerprint is the task, the status and the files, so a change refused again is the same alert."""
    results = []
    for row in report.changes:
        if row.status not in CHANGE_LEVELS:
            continue
        anchor = f"{REPORT}#change-{row.task}"
        why = f" ({row.reason.value})" if row.reason else ""
        text = f"The change of writer task {row.task} did not land: {row.status.value}{why}. {message_text(row.detail)}"
        # The gate's verdict on a change its task did not need is a result, not an alert (as a REFUTED finding).
        caught = row.status is ChangeStatus.REJECTED and not row.fails
        justification = plain(f"REJECTED by the gate{why}: {_squash(row.detail)}")
        locations = [
            Location(
                physical_location=PhysicalLocation(
                    artifact_location=ArtifactLocation(uri=quote(f, safe="/"), uri_base_id=SRCROOT)
                )
            )
            for f in row.files
        ]
        digest = hashlib.sha256("\0".join([row.task, row.status.value, *sorted(row.files)]).encode()).hexdigest()
        results.append(
            Result(
                rule_id=task_rule_id(row.task),
                level=CHANGE_LEVELS[row.status],
                message=Message(text=f"{text.strip()}\n\nReport: {anchor}"),
                locations=locations,
                partial_fingerprints={FINGERPRINT: digest[:32]},
                suppressions=[Suppression(justification=justification)] if caught else None,
                properties=ChangeProperties(
                    tags=["orch", "change", row.status.value],
                    task=row.task,
                    status=row.status.value,
                    reason=row.reason.value if row.reason else None,
                    detail=row.detail,
                    writer=row.writer,
                    writer_agent=row.agent,
                    checks=[
                        f"{c.command}: exit {c.exit_code}" + (" (timed out)" if c.timed_out else "") for c in row.checks
                    ],
                    reviews=[f"{c.job} W{c.reviewer} ({c.agent}): {c.verdict}: {c.reason}" for c in row.reviews],
                    report=anchor,
                ),
            )
        )
    known = {t.id for t in report.tasks}
    rules = [
        Rule(id=task_rule_id(task), name=task, short_description=Message(text=f"task {task}"))
        for task in dict.fromkeys(r.task for r in report.changes if r.task not in known and r.status in CHANGE_LEVELS)
    ]
    return Section(rules=rules, results=results)


SECTIONS: tuple[Callable[[RunReport], Section], ...] = (finding_section, change_section)
"""What goes into report.sarif, in order: the findings, then the changes that did not land."""


def _stamp(report: RunReport, which: Literal["started", "finished"]) -> str | None:
    value = getattr(report, which)
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if value is not None else None


def build_sarif(report: RunReport) -> SarifLog:
    sections = [make(report) for make in SECTIONS]
    rules = [rule for s in sections for rule in s.rules]
    index = {rule.id: i for i, rule in enumerate(rules)}
    results = [r.model_copy(update={"rule_index": index[r.rule_id]}) for s in sections for r in s.results]
    workdir = PurePath(report.workdir)
    bases = {SRCROOT: ArtifactLocation(uri=workdir.as_uri().rstrip("/") + "/")} if workdir.is_absolute() else None
    run = Run(
        tool=Tool(
            driver=Driver(
                name="orch",
                version=__version__,
                semantic_version=__version__,
                information_uri=INFORMATION_URI,
                rules=rules,
            )
        ),
        invocations=[
            Invocation(
                execution_successful=report.status in EXECUTED,
                exit_code=report.exit_code,
                exit_code_description=report.reason or None,
                start_time_utc=_stamp(report, "started"),
                end_time_utc=_stamp(report, "finished"),
            )
        ],
        # GitHub reads the part before the last "/" as the category: every orch run is one.
        automation_details=AutomationDetails(id=f"orch/{report.run}"),
        original_uri_base_ids=bases,
        results=results,
        properties=RunProperties(
            run=report.run,
            status=report.status,
            reason=report.reason,
            isolation=report.isolation,
            offline=report.offline,
            replay_of=report.replay_of,
        ),
    )
    return SarifLog(runs=[run])


def render_sarif(report: RunReport) -> str:
    return build_sarif(report).model_dump_json(by_alias=True, exclude_none=True, indent=2) + "\n"

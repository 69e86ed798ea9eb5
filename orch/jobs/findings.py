"""Findings and verdicts: the structured claims workers write, and the checks that decide whether to accept them.

A finder writes `findings/<job>.json` (FindingsReport); a verifier writes `verdicts/<job>.json`
(VerdictReport). Each carries the job's token (`<job>@<run nonce>`), so a file left by an earlier run or
an earlier job is recognised as stale. Evidence is checked against the workdir: a quoted line must be
found at or near the cited file:line; a cited command must be one the worker actually ran during the
job, and a cited exit code must agree with what its tool result said. What the worker ran comes from the
model gateway's ledger (the tool calls its model asked for and the results Claude Code sent back, which
the worker cannot write); a run without a gateway falls back to the worker's own hook log.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TypeVar

from pydantic import Field, ValidationError

from orch import shellparts
from orch.contracts import ShellTool
from orch.gateway.modeldir import LedgerEntry
from orch.run.files import UnsafeOutput, read_worker_file
from orch.run.folder import RunFolder
from orch.run.hookwriter import DENIED
from orch.run.records import HookEvent, Strict
from orch.text import error_line, shorten

FINDING_ID_PATTERN = r"^[A-Za-z0-9_]{1,16}$"
MAX_FINDINGS = 50
MAX_OUTPUT = 4000
QUOTE_CHARS = 80  # a quote or command cited back in a problem
COMMAND_CHARS = 400  # a command quoted in a flag


M = TypeVar("M", bound=Strict)


class Severity(StrEnum):
    CRITICAL = "critical"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    INFO = "info"


class Verdict(StrEnum):
    CONFIRMED = "CONFIRMED"
    REFUTED = "REFUTED"
    UNVERIFIABLE = "UNVERIFIABLE"


class CodeEvidence(Strict):
    file: str = Field(min_length=1)
    """Path relative to the workdir."""
    line: int = Field(ge=1)
    quote: str = Field(min_length=1)
    """Text copied verbatim from the file at (or within a few lines of) `line`."""

    def cite(self) -> str:
        return f"{self.file}:{self.line}"


class CommandEvidence(Strict):
    command: str = Field(min_length=1)
    """A shell command the worker ran during this job."""
    exit_code: int
    output: str = Field(default="", max_length=MAX_OUTPUT)


Evidence = CodeEvidence | CommandEvidence


class Finding(Strict):
    id: str = Field(pattern=FINDING_ID_PATTERN)
    """Unique within the job: F1, F2, ..."""
    claim: str = Field(min_length=1)
    """What holds, stated so that another worker can check it."""
    severity: Severity
    evidence: list[CodeEvidence] = Field(default_factory=list)
    reproduce: str | None = None
    """Optional shell command, run in the workdir, that exits 0 if and only if the claim holds."""


class Reproduction(Strict):
    """orch's own run of a finding's `reproduce` command (orch.lead.reproduce): in the checks' sandbox, on a copy of
    the tree under audit, with their caps and time limit. Verifiers get it as evidence they may cite as run (its
    command with its exit code), so no verifier need run a worker's command as itself."""

    command: str
    exit_code: int | None = None
    """None: stopped at the time limit (`timed_out`), or never ran (`error`)."""
    timed_out: bool = False
    seconds: float = 0.0
    output: str = ""
    """The tail of what it printed (stdout and stderr)."""
    error: str | None = None
    """Why orch could not run it (no sandbox here, the tree could not be copied)."""

    def ran(self) -> RanCommand | None:
        """As a call that ran the command, for the evidence checks (None: it has no exit code)."""
        return RanCommand(self.command, is_error=self.exit_code != 0) if self.exit_code is not None else None


class FindingsReport(Strict):
    job: str
    """The job token from the brief."""
    findings: list[Finding] = Field(max_length=MAX_FINDINGS)


class VerdictReport(Strict):
    job: str
    finding: str
    verdict: Verdict
    reason: str = Field(min_length=1)
    evidence: list[Evidence] = Field(default_factory=list)


class ProblemKind(StrEnum):
    MISSING_RESULT = "missing-result"
    MISSING_OUTPUT = "missing-output"
    MALFORMED_OUTPUT = "malformed-output"
    STALE_OUTPUT = "stale-output"
    WRONG_FINDING = "wrong-finding"
    DUPLICATE_ID = "duplicate-id"
    NO_EVIDENCE = "no-evidence"
    FALSE_EVIDENCE = "false-evidence"
    UNRUN_COMMAND = "unrun-command"
    FORGED_OUTPUT = "forged-output"
    """A verdict no tool call of the worker's on the job wrote (orch.jobs.authorship)."""
    WRONG_EXIT_CODE = "wrong-exit-code"
    TREE_CHANGED = "tree-changed"


class Problem(Strict):
    kind: ProblemKind
    detail: str


# --- evidence ----------------------------------------------------------------------------------
def _squash(text: str) -> str:
    return " ".join(text.split())


def check_quote(workdir: Path, ev: CodeEvidence, window: int) -> str | None:
    """None when `ev.quote` is found within `window` lines of `ev.file:ev.line`; else what is wrong."""
    root = workdir.resolve()
    path = Path(ev.file)
    target = (path if path.is_absolute() else root / path).resolve()
    if not target.is_relative_to(root):
        return f"{ev.cite()}: the file is outside the workdir"
    try:
        lines = target.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return f"{ev.cite()}: no such file in the workdir"
    except OSError as exc:
        return f"{ev.cite()}: cannot read it ({exc.strerror})"
    if ev.line > len(lines):
        return f"{ev.cite()}: line {ev.line} is past the end of the file ({len(lines)} lines)"
    quote = _squash(ev.quote)
    if not quote:
        return f"{ev.cite()}: the quote is blank"
    span = len(ev.quote.strip().splitlines())
    first, last = max(1, ev.line - window), min(len(lines), ev.line + window + span - 1)
    if quote in _squash("\n".join(lines[first - 1 : last])):
        return None
    return f"{ev.cite()}: quote {shorten(ev.quote, QUOTE_CHARS)!r} is not in lines {first}-{last} of that file"


@dataclass(frozen=True)
class RanCommand:
    """A shell call a worker made during a job."""

    command: str
    """The command as run (ledger), or (hook log) the call's whole tool input JSON-encoded, maybe cut."""
    encoded: bool = False
    is_error: bool | None = None
    """What its tool result said (ledger only; None: no result seen)."""


def hook_commands(events: Iterable[HookEvent], since: float, shell: ShellTool | None) -> list[RanCommand]:
    """The shell calls a worker ran since `since`, from its (worker-writable) hook log; `shell`: its agent's
    shell tool (None: it has none)."""
    out = []
    for event in events:
        if shell is None or event.ts < since or event.hook_event_name != "PostToolUse":
            continue
        if event.tool_name != shell.in_hooks:
            continue
        raw = (event.model_extra or {}).get("tool_input")
        if isinstance(raw, str):
            out.append(RanCommand(raw, encoded=True))
    return out


def ledger_commands(
    entries: Iterable[LedgerEntry], worker: int, job: str, since: float, shell: ShellTool | None
) -> list[RanCommand]:
    """The shell calls worker n's model made on `job`, from the gateway's ledger: lines stamped with the
    job, or unstamped ones since `since` (the brief was sent); each with its tool result's is_error.
    `shell`: the worker's agent's shell tool (its adapter's); a call of any other tool ran no shell."""
    mine = [e for e in entries if e.worker == worker]
    errors = {e.id: e.is_error for e in mine if e.kind == "tool_result"}
    out = []
    for e in _shell_calls(mine, worker, job, since, shell):
        command = (e.input or {}).get(shell.command_field) if shell else None
        if isinstance(command, str):
            out.append(RanCommand(command, is_error=errors.get(e.id)))
    return out


def job_calls(entries: Iterable[LedgerEntry], worker: int, job: str, since: float) -> list[LedgerEntry]:
    """The tool calls worker n's model made on `job`, in order: ledger lines stamped with the job, or unstamped
    ones since `since` (the brief was sent)."""
    return [
        e
        for e in entries
        if e.worker == worker and e.kind == "tool_use" and (e.job == job or (e.job is None and e.ts >= since))
    ]


def _shell_calls(
    mine: Sequence[LedgerEntry], worker: int, job: str, since: float, shell: ShellTool | None
) -> list[LedgerEntry]:
    if shell is None:
        return []
    return [e for e in job_calls(mine, worker, job, since) if e.tool == shell.name]


def denied_writes(
    entries: Iterable[LedgerEntry], worker: int, job: str, since: float, shell: ShellTool | None
) -> list[str]:
    """The shell calls of worker n on `job` whose results say the system refused them something (the
    ledger, which workers cannot write): under strict isolation, attempts beyond its outbox."""
    mine = [e for e in entries if e.worker == worker]
    refused = {e.id for e in mine if e.kind == "tool_result" and e.output and DENIED.search(e.output)}
    field = shell.command_field if shell else ""
    return [
        str((e.input or {}).get(field, ""))[:COMMAND_CHARS]
        for e in _shell_calls(mine, worker, job, since, shell)
        if e.id in refused
    ]


def hook_denied_writes(events: Iterable[HookEvent], since: float, shell: ShellTool | None) -> list[str]:
    """The shell calls worker n's hook log marks refused (`tool_denied`, orch.run.hookwriter) since `since`: its
    own word, so only ever more attempts than the ledger shows (a lying worker can hide them here, not there); the
    only record of an agent with no model behind it (orch's scripted agent)."""
    refused = [e for e in events if (e.model_extra or {}).get("tool_denied") is True]
    out = []
    for call in hook_commands(refused, since, shell):
        try:  # the log keeps tool_input JSON-encoded (and maybe cut: then shown as it is)
            command = json.loads(call.command).get(shell.command_field if shell else "", call.command)
        except (ValueError, AttributeError):
            command = call.command
        out.append(str(command)[:COMMAND_CHARS])
    return out


def runs_of(command: str, ran: Sequence[RanCommand]) -> list[RanCommand]:
    """The calls that ran `command`: it is the whole call, or one of the commands the call's shell executes
    (orch.shellparts: a part of a list or a pipeline, a subshell's body, an if's condition...). A command that
    only appears as text inside another (echoed, quoted, a heredoc's body) was not run."""
    out = []
    for r in ran:
        if r.encoded:
            # The hook log (worker-writable anyway) keeps tool_input JSON-encoded, maybe cut: compare in that
            # form (a per-character escaping, so a substring stays a substring).
            if json.dumps(command.strip())[1:-1] in r.command:
                out.append(r)
        elif shellparts.ran(command, r.command):
            out.append(r)
    return out


def exit_code_problem(ev: CommandEvidence, runs: Sequence[RanCommand]) -> str | None:
    """A cited exit code against the results of calls that ran exactly that command (a part of a longer
    call has no exit code of its own): it must agree with one of them."""
    exact = [r for r in runs if not r.encoded and r.is_error is not None and r.command.strip() == ev.command.strip()]
    if not exact or any(r.is_error == (ev.exit_code != 0) for r in exact):
        return None
    said = "failed" if exact[-1].is_error else "succeeded"
    return f"you cite exit {ev.exit_code} for {shorten(ev.command, QUOTE_CHARS)!r}, but its tool result says it {said}"


def evidence_problems(
    evidence: Sequence[Evidence], workdir: Path, window: int, commands: Sequence[RanCommand], what: str
) -> list[Problem]:
    problems = []
    for i, ev in enumerate(evidence):
        if isinstance(ev, CodeEvidence):
            wrong = check_quote(workdir, ev, window)
            if wrong:
                problems.append(Problem(kind=ProblemKind.FALSE_EVIDENCE, detail=f"{what} evidence[{i}] {wrong}"))
            continue
        runs = runs_of(ev.command, commands)
        if not runs:
            problems.append(
                Problem(
                    kind=ProblemKind.UNRUN_COMMAND,
                    detail=f"{what} evidence[{i}]: you did not run {shorten(ev.command, QUOTE_CHARS)!r} "
                    "during this job",
                )
            )
        elif (wrong_exit := exit_code_problem(ev, runs)) is not None:
            problems.append(Problem(kind=ProblemKind.WRONG_EXIT_CODE, detail=f"{what} evidence[{i}]: {wrong_exit}"))
    return problems


# --- reading worker files ----------------------------------------------------------------------
def result_problems(run: RunFolder, worker: int) -> list[Problem]:
    path = run.result(worker)
    try:
        text = read_worker_file(path).decode(errors="replace")
    except FileNotFoundError:
        return [Problem(kind=ProblemKind.MISSING_RESULT, detail=f"there is no result file ({path.name})")]
    except (UnsafeOutput, OSError) as exc:
        return [Problem(kind=ProblemKind.MISSING_RESULT, detail=f"the result file cannot be read: {exc}")]
    if not text.strip():
        return [Problem(kind=ProblemKind.MISSING_RESULT, detail=f"the result file ({path.name}) is empty")]
    return []


def _load(model: type[M], path: Path, token: str) -> tuple[M | None, list[Problem]]:
    try:
        raw = read_worker_file(path).decode(errors="replace")
    except FileNotFoundError:
        return None, [Problem(kind=ProblemKind.MISSING_OUTPUT, detail=f"{path} does not exist")]
    except (UnsafeOutput, OSError) as exc:
        return None, [Problem(kind=ProblemKind.MALFORMED_OUTPUT, detail=f"{path} cannot be read: {exc}")]
    try:
        loaded = json.loads(raw)
    except ValueError as exc:
        return None, [Problem(kind=ProblemKind.MALFORMED_OUTPUT, detail=f"{path} is not valid JSON: {exc}")]
    if isinstance(loaded, dict) and isinstance(loaded.get("job"), str) and loaded["job"] != token:
        return None, [
            Problem(
                kind=ProblemKind.STALE_OUTPUT,
                detail=f"{path} is for job {loaded['job']!r}, not this job {token!r} "
                "(left from an earlier job or run?)",
            )
        ]
    try:
        return model.model_validate(loaded), []
    except ValidationError as exc:
        return None, [Problem(kind=ProblemKind.MALFORMED_OUTPUT, detail=f"{path}: {describe(exc)}")]


def describe(exc: ValidationError, limit: int = 6) -> str:
    """Pydantic errors as `where: what; ...` for a worker to act on."""
    parts = [error_line(err, "(top level)") for err in exc.errors(include_url=False)[:limit]]
    more = len(exc.errors()) - limit
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def check_findings(
    run: RunFolder, job: str, token: str, worker: int, workdir: Path, window: int
) -> tuple[FindingsReport | None, list[Problem]]:
    """A finder's output: result file plus a findings file whose findings all carry checkable evidence."""
    problems = result_problems(run, worker)
    report, load_problems = _load(FindingsReport, run.outbox_findings(worker, job), token)
    problems += load_problems
    if report is None:
        return None, problems
    seen: set[str] = set()
    for finding in report.findings:
        if finding.id in seen:
            problems.append(Problem(kind=ProblemKind.DUPLICATE_ID, detail=f"finding id {finding.id} is used twice"))
        seen.add(finding.id)
        if not finding.evidence:
            problems.append(
                Problem(
                    kind=ProblemKind.NO_EVIDENCE,
                    detail=f"finding {finding.id} has no evidence: cite file, line and a verbatim quote",
                )
            )
        problems += evidence_problems(finding.evidence, workdir, window, [], f"finding {finding.id}")
    return (report if not problems else None), problems


def check_verdict(
    run: RunFolder,
    job: str,
    token: str,
    finding: str,
    worker: int,
    workdir: Path,
    window: int,
    commands: Sequence[RanCommand],
) -> tuple[VerdictReport | None, list[Problem]]:
    """A verifier's output: result file plus a verdict on the right finding whose evidence checks out.

    `commands`: the Bash calls the worker made during the job (`ledger_commands`, or `hook_commands` for a
    run without a gateway); cited commands must be there, with an exit code their results agree with.
    """
    problems = result_problems(run, worker)
    report, load_problems = _load(VerdictReport, run.outbox_verdict(worker, job), token)
    problems += load_problems
    if report is None:
        return None, problems
    if report.finding != finding:
        problems.append(
            Problem(kind=ProblemKind.WRONG_FINDING, detail=f"the verdict is about {report.finding!r}, not {finding!r}")
        )
    if report.verdict is not Verdict.UNVERIFIABLE and not report.evidence:
        problems.append(
            Problem(
                kind=ProblemKind.NO_EVIDENCE,
                detail=f"a {report.verdict.value} verdict needs evidence you checked: a file:line with a verbatim "
                "quote, or a command you ran with its exit code",
            )
        )
    problems += evidence_problems(report.evidence, workdir, window, commands, "verdict")
    return (report if not problems else None), problems

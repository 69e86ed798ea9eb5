"""The `{{name}}` placeholders of briefs and offline scripts: which ones each role's template may use
(orch.spec.load checks a spec's templates against them), filling them, and a script as the fenced
block the scripted model reads."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from orch.errors import UsageError
from orch.spec.model import Role, ScriptStep

PLACEHOLDER_RE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")

# What each role's template may use. Every brief also gets the worker protocol (result file, done
# flag, bus, autonomy) appended by orch.run.workerprotocol.
COMMON_PLACEHOLDERS = (
    "job",
    "job_id",
    "run",
    "run_dir",
    "worker",
    "workers",
    "workdir",
    "result_file",
    "done_file",
)
TASK_PLACEHOLDERS = ("task_id", "title", "goal", "files")
PLACEHOLDERS: dict[Role, tuple[str, ...]] = {
    Role.FINDER: (*COMMON_PLACEHOLDERS, *TASK_PLACEHOLDERS, "findings_file"),
    Role.WRITER: (*COMMON_PLACEHOLDERS, *TASK_PLACEHOLDERS, "checks"),
    Role.FIXER: (*COMMON_PLACEHOLDERS, *TASK_PLACEHOLDERS, "confirmed_findings"),
    Role.SCRIBE: (*COMMON_PLACEHOLDERS, *TASK_PLACEHOLDERS, "confirmed_findings"),
    Role.REVIEWER: (
        *COMMON_PLACEHOLDERS,
        "change_id",
        "task_id",
        "goal",
        "diff",
        "diffstat",
        "checks",
        "verdict_file",
        "risks",
    ),
    Role.VERIFIER: (
        *COMMON_PLACEHOLDERS,
        "finding_id",
        "claim",
        "severity",
        "evidence",
        "reproduce",
        "reproduced",
        "round",
        "stance",
        "verdict_file",
    ),
}


def placeholders(text: str) -> list[str]:
    return PLACEHOLDER_RE.findall(text)


def render(text: str, values: dict[str, str]) -> str:
    """Fill `{{name}}` placeholders; an unknown name is a UsageError (spec checks catch it first)."""

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise UsageError(f"unknown placeholder {{{{{name}}}}}", hint=f"use one of: {', '.join(sorted(values))}")
        return values[name]

    return PLACEHOLDER_RE.sub(fill, text)


def render_steps(steps: Sequence[ScriptStep], values: dict[str, str]) -> list[ScriptStep]:
    def fill(value: Any) -> Any:
        if isinstance(value, str):
            return render(value, values)
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fill(v) for v in value]
        return value

    return [fill(step) for step in steps]


def script_block(steps: Sequence[ScriptStep]) -> str:
    """An orch-script fenced block (one JSON step per line) for the scripted model server."""
    body = "\n".join(json.dumps(step) for step in steps)
    return f"```orch-script\n{body}\n```\n"

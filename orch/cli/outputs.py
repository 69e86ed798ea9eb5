"""The shape of every `--json` output, one place: each command that reads state prints one of these pydantic
models, each with its own `schema_version` (raised when a key changes meaning or goes; new keys may come
without). `outputs()` names them all; docs/outputs.md's tables are made from it (`python -m orch.cli.outputs`
writes them; tests/cli/test_outputs.py checks they are current).

The models of `orch run`'s line (RunSummary), `orch report` (RunReport, report.json itself) and `orch watch`'s
snapshot (Snapshot) live with the code that fills them; the others are here.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
import textwrap
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from orch.contracts import Check
from orch.run.records import BusLine, RunStatus, Strict
from orch.run.statusview import RunOutcome, RunStatusView


class StatusOutput(Strict):
    """`orch status --json`: each run asked for (all of them without a NAME)."""

    schema_version: Literal[1] = 1
    runs: list[RunStatusView]
    """Per run: its state, outcome, start, end and cost; per worker: its state, jobs, cost and last bus line."""


class RunRow(Strict):
    """One run as `orch ls` lists it."""

    name: str
    backend: str
    agents: list[str]
    workers: int
    status: RunStatus
    outcome: RunOutcome | None = None
    """An `orch run` that has ended: status, exit code, reason."""
    started: str | None = None
    finished: str | None = None
    cost_usd: float | None = None
    billed: bool | None = None
    unbilled: str | None = None
    """Why nothing was billed (offline, replayed), to show beside the cost."""
    container: str | None = None
    """A container or swarm run: where it is (its container's state, its swarm task's); None for a local run."""

    @classmethod
    def of(cls, view: RunStatusView, agents: list[str], workers: int, container: str | None) -> RunRow:
        return cls(
            name=view.name,
            backend=view.backend,
            agents=agents,
            workers=workers,
            status=view.status,
            outcome=view.outcome,
            started=view.started.isoformat() if view.started else None,
            finished=view.finished.isoformat() if view.finished else None,
            cost_usd=view.cost_usd,
            billed=view.billed,
            unbilled=view.unbilled,
            container=container,
        )


class LsOutput(Strict):
    """`orch ls --json`."""

    schema_version: Literal[1] = 1
    runs: list[RunRow]


class ReadOutput(Strict):
    """`orch read NAME N --json`."""

    schema_version: Literal[1] = 1
    run: str
    worker: int
    source: Literal["screen", "transcript"]
    """`screen`: the live pane; `transcript`: the stopped run's terminal log, rendered (orch.run.terminal)."""
    lines: list[str]


class BusTailOutput(Strict):
    """`orch bus tail NAME --json`: the bus's last lines."""

    schema_version: Literal[1] = 1
    run: str
    lines: list[BusLine]
    """The last lines (`--lines`), oldest first: time, sender, text (newlines escaped as on disk). The sender is
    the one the line names: stamped by the controller under strict isolation, a shared worker may write any."""
    unparsed: list[str] = Field(default_factory=list)
    """Lines among them not in the bus's format (a shared worker can append anything to bus.md), as they are."""


class DoctorCheck(Strict):
    name: str
    ok: bool
    detail: str
    fix: str | None = None
    optional: bool = False
    """A missing optional part (Docker, the image, a credential no fleet asked for) does not fail `orch doctor`."""

    @classmethod
    def of(cls, check: Check) -> DoctorCheck:
        return cls(name=check.name, ok=check.ok, detail=check.detail, fix=check.fix, optional=check.optional)


class DoctorOutput(Strict):
    """`orch doctor --json`."""

    schema_version: Literal[1] = 1
    ok: bool
    """Every check that is not optional passed (`orch doctor` exits 0)."""
    checks: list[DoctorCheck]


class SpecCheckOutput(Strict):
    """`orch spec check FILE --json`: what `orch run` would make of the spec, checked as it checks it."""

    schema_version: Literal[1] = 1
    file: str
    ok: bool
    """`orch run` would start it (exit 0); else `problems` or `refused` says why (exit 2, or the refusal's code)."""
    problems: list[str] = Field(default_factory=list)
    """The spec's own problems, each with its location (exit 2)."""
    refused: str | None = None
    """A check of the run refused it, in one line: the recording, a credential, an agent, the sandbox, a run of
    that name, the repository or the checks of a spec with writers."""
    run: str | None = None
    """The run's name."""
    summary: str | None = None
    """What it would run, in one line: the workers, the tasks by role, verification, checks, budget, where."""
    warnings: list[str] = Field(default_factory=list)


def outputs() -> dict[str, type[BaseModel]]:
    """Every `--json` output by the command that prints it (docs/outputs.md). The models filled elsewhere are
    imported here, not at the top: `orch status` need not load the report's and the view's modules."""
    from orch.report.model import RunReport
    from orch.report.summary import RunsSummary, RunSummary
    from orch.view.snapshot import Snapshot

    return {
        "orch run --json": RunSummary,
        "orch run SPEC... [--repo PATH]... --json": RunsSummary,
        "orch report NAME --json": RunReport,
        "orch status [NAME] --json": StatusOutput,
        "orch ls --json": LsOutput,
        "orch read NAME N --json": ReadOutput,
        "orch bus tail NAME --json": BusTailOutput,
        "orch doctor --json": DoctorOutput,
        "orch spec check FILE --json": SpecCheckOutput,
        "orch watch [NAME] --json": Snapshot,
    }


# --- docs/outputs.md ------------------------------------------------------------------------------------
def _docstrings(model: type[BaseModel]) -> dict[str, str]:
    """A model's attribute docstrings (read from its source only here, never at import: see orch.run.records)."""
    out: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls.__module__.startswith("pydantic"):
            continue
        body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
        assert isinstance(body, ast.ClassDef)
        for node, after in zip(body.body, body.body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                out[node.target.id] = " ".join(after.value.value.split())
    return out


def _type(kind: Any) -> str:
    """A field's annotation as a reader writes it: `list[WorkerStatus]`, `str | None` (no module paths)."""
    if isinstance(kind, type):
        return kind.__name__
    text = re.sub(r"\b(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_])", "", str(kind))  # typing.Literal, a model by its module path
    return text.replace("NoneType", "None")


def _table(model: type[BaseModel]) -> list[str]:
    docs = _docstrings(model)
    lines = ["| key | type | meaning |", "|---|---|---|"]
    for name, field in model.model_fields.items():
        meaning = docs.get(name, "").replace("|", "\\|")
        kind = _type(field.annotation).replace("|", "\\|")  # a pipe splits a table's cell, in code too
        lines.append(f"| `{name}` | `{kind}` | {meaning} |")
    return lines


def nested(model: type[BaseModel]) -> list[type[BaseModel]]:
    """The models a model's fields hold, in the order they first appear (each once)."""
    found: list[type[BaseModel]] = []

    def visit(kind: Any) -> None:
        if isinstance(kind, type) and issubclass(kind, BaseModel) and kind not in found:
            found.append(kind)
            for field in kind.model_fields.values():
                visit(field.annotation)
        for arg in typing.get_args(kind):
            visit(arg)

    visit(model)
    return found[1:]


def document() -> str:
    """docs/outputs.md's generated part: per command, its model's keys, then the models those hold."""
    out: list[str] = []
    every = outputs()
    for command, model in every.items():
        version = model.model_fields["schema_version"].default
        out += [f"### `{command}`", "", f"`{model.__name__}`, `schema_version` {version}.", "", *_table(model), ""]
    shown: set[type[BaseModel]] = set(every.values())
    parts = [m for model in every.values() for m in nested(model)]
    for part in dict.fromkeys(parts):
        if part not in shown:
            shown.add(part)
            out += [f"#### `{part.__name__}`", "", *_table(part), ""]
    return "\n".join(out).rstrip() + "\n"


BEGIN = "<!-- generated by `python -m orch.cli.outputs`: do not edit below -->"
PAGE = Path("docs/outputs.md")


def main(argv: list[str]) -> int:
    """Rewrite docs/outputs.md's generated part, below BEGIN (run from the repository's root)."""
    page = Path(argv[0]) if argv else PAGE
    head = page.read_text().split(BEGIN, 1)[0]
    page.write_text(head + BEGIN + "\n\n" + document())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

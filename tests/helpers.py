"""Small helpers for tests: run the CLI in-process, read a run's files."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner, Result

from orch.cli import app
from orch.workspace import RunFolder

runner = CliRunner()


def orch(*args: str | Path, input: str | bytes | None = None) -> Result:
    return runner.invoke(app, [str(a) for a in args], input=input)


def prompts(run: RunFolder, n: int) -> list[str]:
    return [e.prompt or "" for e in run.hook_events(n) if e.hook_event_name == "UserPromptSubmit"]

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


def diagnose(run: RunFolder) -> str:
    """What each worker was doing: for assertion messages when a fleet did not finish."""
    from orch import fleet

    out = []
    for n in range(1, run.info().workers + 1):
        events = [f"{e.hook_event_name}:{e.tool_name or ''}" for e in run.hook_events(n)[-8:]]
        try:
            screen = fleet.read(run, n, 15)
        except Exception as exc:  # diagnostics must not raise
            screen = f"<no screen: {exc}>"
        out.append(f"--- worker {n}: events {events}\n{screen}")
    return "\n".join(out)

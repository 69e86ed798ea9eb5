"""The one table of exit codes (orch/exitcodes.py) is what `--help`, docs/ci.md and action.yml say, and what the
controller's outcome uses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from orch import exitcodes
from orch.errors import OrchError, UsageError, WaitTimeoutError
from orch.exitcodes import Exit
from tests.helpers import orch

pytestmark = pytest.mark.pure  # reads files and renders help: starts nothing

REPO = Path(__file__).resolve().parents[1]


def _plain(text: str) -> str:
    """Help text without rich's box and wrapping: one line of words."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def test_docs_ci_has_the_table() -> None:
    assert exitcodes.markdown() in (REPO / "docs" / "ci.md").read_text()


def test_action_yml_names_each_code_orch_run_exits_with() -> None:
    action = yaml.safe_load((REPO / "action.yml").read_text())
    said = " ".join(action["outputs"]["exit-code"]["description"].split())
    assert exitcodes.brief(exitcodes.RUN) in said
    assert "docs/ci.md" in " ".join(action["description"].split())


@pytest.mark.parametrize(
    ("command", "codes"),
    [(["run"], exitcodes.RUN), (["demo"], exitcodes.RUN), (["report"], exitcodes.REPORT), (["wait"], exitcodes.WAIT)],
)
def test_help_gives_each_commands_codes_from_the_table(command: list[str], codes: tuple[Exit, ...]) -> None:
    shown = _plain(orch(*command, "--help").output)
    for code in codes:
        row = exitcodes.ROWS[code]
        assert f"{int(code)} {row.status + ': ' if row.status else ''}{row.when}" in shown, (command, code)


def test_the_errors_exit_codes_are_the_tables() -> None:
    assert (OrchError.exit_code, UsageError.exit_code, WaitTimeoutError.exit_code) == (
        Exit.ERROR,
        Exit.BAD_INPUT,
        Exit.NOT_FINISHED,
    )
    assert [r.code for r in exitcodes.TABLE if r.status] == [Exit.PASSED, Exit.FINDINGS, Exit.INCOMPLETE, Exit.FAILED]
    assert len({r.code for r in exitcodes.TABLE}) == len(exitcodes.TABLE) == len(Exit)

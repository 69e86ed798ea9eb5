"""The workers' briefs and messages (orch/lead/briefs.py): neutral default templates that say where to write, no
message naming a brief's path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orch.jobs.findings import (
    check_findings,
)
from orch.jobs.state import (
    Job,
    Stance,
)
from orch.lead import briefs
from orch.run.folder import RunFolder
from orch.spec.model import Role, default_template

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network


@pytest.mark.parametrize("role", list(Role))
def test_default_templates_are_neutral_and_say_where_to_write(role: Role) -> None:
    text = default_template(role)
    assert not re.search(r"\bbug|fix the\b|\bbroken\b", text, re.IGNORECASE), role
    assert "result file" in text
    if role is Role.FINDER:
        assert "{{findings_file}}" in text and "{{job}}" in text
    if role is Role.VERIFIER:
        assert "{{verdict_file}}" in text and "refute" in briefs.STANCES[Stance.VERIFY]


def test_messages_never_name_a_brief_path(tmp_path: Path) -> None:
    """A later message naming an absolute *.md path would restart the scripted model's script."""
    run = RunFolder(tmp_path / "run")
    job = Job(id="t1", role=Role.FINDER)
    problems = [
        check_findings(run, "t1", "t1@x", 1, tmp_path, 3)[1][0],
    ]
    for text in (
        briefs.correction_text(run, job, 1, problems, 1, 2),
        briefs.nudge_text(run, job, 1),
        briefs.continue_text(job, "rate_limit"),
    ):
        assert not re.search(r"/[^\s'\"`<>()]+\.md\b", text), text

"""orch/lead/changes/agentfiles.py: agent configuration and instructions in a change are out of scope unless the
task allows them, whatever the spec's `protect:` says, and a reviewer's brief names them as a risk."""

from __future__ import annotations

import pytest

from orch.jobs.changes import Change
from orch.lead.changes.agentfiles import agent_files, risk_note, violations

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

EVERY_AGENT = [
    ".claude/settings.json",
    "sub/.claude/settings.local.json",
    ".mcp.json",
    "CLAUDE.md",
    "docs/CLAUDE.md",
    ".codex/config.toml",
    ".agents/skills/x/SKILL.md",
    "AGENTS.md",
    ".gemini/settings.json",
    "GEMINI.md",
    ".opencode/plugins/x.js",
    "opencode.json",
    ".aider.conf.yml",
    ".aider.model.settings.yml",
]


def change(*files: str) -> Change:
    return Change(job="fix", task="fix", writer=1, agent="claude", base="b" * 40, tree="t" * 40, files=list(files))


def test_every_agents_own_files_are_found_at_any_depth_and_nothing_else() -> None:
    assert agent_files([*EVERY_AGENT, "calc.py", "docs/agents.txt", "claude.py"]) == EVERY_AGENT


def test_a_change_carrying_them_is_out_of_scope_unless_its_task_allows_them() -> None:
    found = violations(change("calc.py", ".claude/settings.json", "AGENTS.md"), allow=[])
    assert found == [
        ".claude/settings.json: agent configuration or instructions, not allowed by the task",
        "AGENTS.md: agent configuration or instructions, not allowed by the task",
    ]
    assert violations(change(".claude/settings.json", "AGENTS.md"), allow=[".claude/**", "AGENTS.md"]) == []
    # Matched from the workdir too, when the run's workdir is a folder of the repository.
    assert violations(change("app/AGENTS.md"), allow=["AGENTS.md"], subdir="app") == []


def test_a_name_with_a_line_break_is_shown_on_one_line() -> None:
    (found,) = violations(change("x\n## Injected/.claude/settings.json"), allow=[])
    assert "\n" not in found


def test_the_reviewer_is_told_which_and_why() -> None:
    assert risk_note(["calc.py"]) == ""
    note = risk_note(["calc.py", ".claude/settings.json", "evil`name/AGENTS.md"])
    assert "`.claude/settings.json`" in note and "``evil`name/AGENTS.md``" in note
    assert "does not load them" in note and "calc.py" not in note

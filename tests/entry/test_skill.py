"""`orch skill install`: the lead skill in Claude Code's config dir."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orch.entry.skill import install
from tests.helpers import orch

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network


def test_skill_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "cfg"))
    result = orch("skill", "install")
    assert result.exit_code == 0, result.output
    path = tmp_path / "cfg" / "skills" / "orch" / "SKILL.md"
    head = yaml.safe_load(path.read_text().split("---")[1])
    assert head["name"] == "orch" and "verif" in head["description"]
    assert install(tmp_path / "elsewhere").read_text() == path.read_text()

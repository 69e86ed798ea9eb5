"""`orch skill install`: the lead playbook as a Claude Code skill (SKILL.md) that drives orch's commands."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from orch.run.files import atomic_write

SKILL_NAME = "orch"


def skills_dir() -> Path:
    """Where Claude Code looks for personal skills: $CLAUDE_CONFIG_DIR/skills, else ~/.claude/skills."""
    base = os.environ.get("CLAUDE_CONFIG_DIR")
    return (Path(base) if base else Path.home() / ".claude") / "skills"


def skill_text() -> str:
    return (resources.files("orch") / "data" / "skill" / "SKILL.md").read_text(encoding="utf-8")


def install(target: Path | None = None) -> Path:
    """Write SKILL.md into `target` (default: the skills dir's `orch/`); returns the file written."""
    folder = target if target is not None else skills_dir() / SKILL_NAME
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "SKILL.md"
    atomic_write(path, skill_text())
    return path

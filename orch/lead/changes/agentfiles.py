"""Agent configuration and instructions in a change: what an agent CLI reads from a folder (`.claude/settings.json`
and its hooks, `.codex/`, `.mcp.json`, AGENTS.md...: each adapter's `project_files`) is out of scope unless the
task allows it, and a reviewer's brief names it as a risk.

orch starts every agent with its folder's configuration off (SECURITY.md, "Deputies"), so such a file does not run
as the reviewer or a later writer. It still runs, or instructs, whoever opens the repository with that agent after
`orch apply`: a change carrying one lands only when the task asked for it, and then only past a reviewer told.
"""

from __future__ import annotations

from collections.abc import Sequence

from orch import escape
from orch.agents.registry import project_files
from orch.jobs.changes import Change
from orch.lead.changes.grading import matches

SHOWN = 20
"""The most agent files a reviewer's brief names one by one."""


def agent_files(files: Sequence[str]) -> list[str]:
    """The paths of `files` (from the tree's root) that some agent CLI reads as configuration or instructions."""
    globs = project_files()
    return [path for path in files if any(matches(path, glob) for glob in globs)]


def violations(change: Change, allow: Sequence[str], subdir: str = "") -> list[str]:
    """Each agent file the change adds, edits or deletes that the task does not allow (its `allow:` globs,
    matched from the tree's root and from the workdir `subdir`)."""
    prefix = f"{subdir.strip('/')}/" if subdir else ""
    out = []
    for path in agent_files(change.files):
        names = [path] + ([path[len(prefix) :]] if prefix and path.startswith(prefix) else [])
        if not any(matches(name, glob) for glob in allow for name in names):
            out.append(f"{escape.one_line(path)}: agent configuration or instructions, not allowed by the task")
    return out


def risk_note(files: Sequence[str]) -> str:
    """The reviewer's brief's word on the agent files a change touches (empty when it touches none)."""
    found = agent_files(files)
    if not found:
        return ""
    listed = ", ".join(escape.markdown_code(path) for path in found[:SHOWN])
    listed += f" and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    return (
        f"\nRisk: this change edits agent configuration or instructions ({listed}). Your agent does not load "
        "them (orch starts every agent with its folder's configuration off), but whoever opens this repository with "
        "that agent later does: read them as code that runs, or instructions that steer, as them. Refute the change "
        "if they do more than the task asks.\n"
    )

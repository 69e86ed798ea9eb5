"""The tree under audit as evidence, where no mount keeps it read-only (shared isolation: local runs, and
runs with writers before their writers start).

At the controller's first start it notes every file of the workdir (size, mtime, mode). A finder or
verifier job that ends with one of those files changed or gone is not accepted as it stands: its quotes
and commands were checked against a tree someone edited (a worker planting the defect it reports, say).
New files are not counted: honest tools leave caches and build outputs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from orch.run.files import atomic_write
from orch.run.folder import RunFolder

MAX_FILES = 200_000
"""Past this many files the tree is not noted (a walk per job would cost too much); the run says so."""
SKIPPED_DIRS = frozenset({".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", "node_modules"})
"""Folders tools rewrite on their own (caches, a VCS's own store): not evidence."""


def snapshot(root: Path) -> dict[str, str] | None:
    """Every file under `root` (relative path: size, mtime and mode), None when there are too many."""
    found: dict[str, str] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
        for name in files:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            found[os.path.relpath(path, root)] = f"{st.st_size}:{st.st_mtime_ns}:{st.st_mode:o}"
            if len(found) > MAX_FILES:
                return None
    return found


def note(run: RunFolder, root: Path) -> bool:
    """Note the tree once per run (kept in the run folder); False when it is too large to note."""
    if run.tree_snapshot.exists():
        return True
    files = snapshot(root)
    if files is None:
        return False
    atomic_write(run.tree_snapshot, json.dumps(files, sort_keys=True))
    return True


def changed(run: RunFolder, root: Path, limit: int = 5) -> list[str]:
    """Files noted at the start that are now different or gone (at most `limit`); [] when none or not noted."""
    try:
        before: dict[str, str] = json.loads(run.tree_snapshot.read_text())
    except (OSError, ValueError):
        return []
    now = snapshot(root) or {}
    return sorted(path for path, mark in before.items() if now.get(path) != mark)[:limit]

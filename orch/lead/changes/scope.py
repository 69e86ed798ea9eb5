"""The gate's scope: a change may not edit a protected path its task does not allow (globs with gitignore's rules),
and what the snapshot refused keeps it out too."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import pathspec

from orch.jobs.changes import Change


def matches(path: str, glob: str) -> bool:
    """Whether a tree path (from the root, `/`-separated) matches a protect/allow glob, with gitignore's
    rules (pathspec): `**` spans folders, `*` and `?` stay within one, a glob without `/` matches the name at
    any depth, a glob with one is anchored at the root."""
    return _spec(glob).match_file(path)


@functools.lru_cache(maxsize=512)
def _spec(glob: str) -> pathspec.GitIgnoreSpec:
    return pathspec.GitIgnoreSpec.from_lines([glob])


def scope_violations(change: Change, protect: Sequence[str], allow: Sequence[str], subdir: str = "") -> list[str]:
    """What puts the change out of scope: the snapshot's refusals, and each protected path it edits that the
    task does not allow (paths are matched from the tree's root and from the workdir `subdir`)."""
    out = list(change.refused)
    prefix = f"{subdir.strip('/')}/" if subdir else ""
    for path in change.files:
        names = [path] + ([path[len(prefix) :]] if prefix and path.startswith(prefix) else [])
        hit = next((g for g in protect for name in names if matches(name, g)), None)
        if hit is None or any(matches(name, g) for g in allow for name in names):
            continue
        out.append(f"{path}: protected ({hit}) and not allowed by the task")
    return out


def unmatched_globs(tree_files: Sequence[str], globs: Sequence[str]) -> list[str]:
    """The globs that match no file of the base (a warning at the start, not an error)."""
    return [g for g in globs if not any(matches(f, g) for f in tree_files)]

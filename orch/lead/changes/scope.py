"""The gate's scope: a change may not edit a grading path (a protected glob, a file a check names:
orch.lead.changes.grading) its task does not allow, and what the snapshot refused keeps it out too."""

from __future__ import annotations

from collections.abc import Sequence

from orch.jobs.changes import Change
from orch.lead.changes.grading import Grading, matches


def scope_violations(change: Change, rules: Grading | Sequence[str], allow: Sequence[str]) -> list[str]:
    """What puts the change out of scope: the snapshot's refusals, and each grading path it adds, edits or
    deletes that the task does not allow (matched from the tree's root and from the workdir). `rules`: the
    run's grading paths, or protected globs alone (matched from the root)."""
    rules = rules if isinstance(rules, Grading) else Grading(tuple(rules))
    out = list(change.refused)
    for path in change.files:
        why = rules.why(path)
        if why is None or any(matches(name, g) for g in allow for name in rules.names(path)):
            continue
        shown = repr(path) if any(ord(c) < 32 or ord(c) == 127 for c in path) else path  # a newline in a name: seen
        out.append(f"{shown}: protected ({why}) and not allowed by the task")
    return out


def unmatched_globs(tree_files: Sequence[str], globs: Sequence[str]) -> list[str]:
    """The globs that match no file of the base (a warning at the start, not an error)."""
    return [g for g in globs if not any(matches(f, g) for f in tree_files)]

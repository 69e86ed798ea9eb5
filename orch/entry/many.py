"""`orch run SPEC... [--repo PATH ...]`: several runs from one command, one per (spec, repository), each with a
name of its own, all checked before any is made.

The names are derived, readable and unique: the spec's name (or file name) and the repository's folder name,
`audit-shop` for audit.yaml over ./shop; `--name` takes the spec's place. Two repositories of one folder name
are told apart by their parent folders (`a-shop`, `b-shop`); a name that still clashes, or one given twice,
is refused before anything is made. Every character but letters, digits and `_` becomes `-` (a swarm
service's name has no dot), so no path, however named, becomes anything but a plain name: a name is never a
command or a path.

What then starts them lives in orch.cli.many: side by side on a backend that places runs on its nodes
(Swarm), one after another on one machine.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orch.errors import UsageError
from orch.exitcodes import Exit
from orch.run.folder import validate_name

DERIVED_MAX = 48
"""How long a derived name may be: room for what a backend adds around it (a swarm run's `orch-NAME-home`
service, whose name Swarm caps at 63)."""
WORST_FIRST = (Exit.INTERRUPTED, Exit.ERROR, Exit.BAD_INPUT, Exit.FAILED, Exit.INCOMPLETE, Exit.FINDINGS)
"""Several runs exit with the worst of their codes, in this order; then any other code, then 0."""


@dataclass(frozen=True)
class Planned:
    """One run of several: its spec, the repository it works on (None: the spec's own workdir), its name."""

    spec: Path
    repo: Path | None
    name: str

    def describe(self) -> str:
        return f"{self.spec}" + (f" over {self.repo}" if self.repo is not None else "")


def slug(text: str) -> str:
    """`text` as a part of a run name: every other character `-` (a dot too: a swarm service's name has none),
    no leading or trailing punctuation."""
    return re.sub(r"[^A-Za-z0-9_]+", "-", text).strip("-_")


def labels(paths: Sequence[Path], first: Callable[[Path], str]) -> list[str]:
    """A label per path, told apart: `first(path)` (a spec's name, a folder's name), with as many parent folders
    in front as it takes to tell clashing ones apart (`a-shop`, `b-shop`)."""
    depth = [0] * len(paths)

    def label(i: int) -> str:
        parents = paths[i].parent.parts[len(paths[i].parent.parts) - depth[i] :] if depth[i] else ()
        return "-".join(p for p in (*(slug(part) for part in parents), slug(first(paths[i]))) if p)

    while True:
        made = [label(i) for i in range(len(paths))]
        clashing = [i for i, text in enumerate(made) if Counter(made)[text] > 1]
        deeper = [i for i in clashing if depth[i] < len(paths[i].parent.parts) - 1]
        if not deeper:
            return made
        for i in deeper:
            depth[i] += 1


def plan(specs: Sequence[tuple[Path, str]], repos: Sequence[Path], name: str | None = None) -> list[Planned]:
    """A run per (spec, repository), named: `specs` each with its own name (its `name:` or file name). Refused
    in one line, before anything exists: a repository that is not a folder, a spec or repository given twice,
    two runs of one name."""
    _once([path.resolve() for path, _ in specs], "spec")
    resolved = [_folder(repo) for repo in repos]
    _once(resolved, "--repo")
    if name is not None:
        validate_name(name)
    spec_names = {path.resolve(): spec_name for path, spec_name in specs}
    spec_labels = labels(list(spec_names), spec_names.__getitem__)
    repo_labels: list[tuple[Path | None, str]] = list(zip(resolved, labels(resolved, lambda p: p.name), strict=True))
    made: list[Planned] = []
    for (path, _), spec_label in zip(specs, spec_labels, strict=True):
        for repo, repo_label in repo_labels or [(None, "")]:
            parts = [name or spec_label] if name is None or len(specs) == 1 else [name, spec_label]
            derived = "-".join(p for p in (*parts, repo_label) if p)[:DERIVED_MAX].strip("-_")
            made.append(Planned(path, repo, derived))
    for n, planned in enumerate(made):
        validate_name(planned.name)
        for other in made[:n]:
            if other.name == planned.name:
                raise UsageError(
                    f"{other.describe()} and {planned.describe()} would both be run {planned.name!r}",
                    hint="rename a spec (its name:), or give --name to each spec's own command",
                )
    return made


def worst(codes: Sequence[int]) -> int:
    """The exit code of several runs: the worst of theirs (WORST_FIRST), 0 when every one passed."""
    for code in WORST_FIRST:
        if code in codes:
            return int(code)
    return max(codes, default=0)


def _folder(repo: Path) -> Path:
    if not repo.is_dir():
        raise UsageError(f"--repo {repo}: no such folder", hint="give a repository's folder")
    return repo.resolve()


def _once(paths: Sequence[Path], what: str) -> None:
    for path, count in Counter(paths).items():
        if count > 1:
            raise UsageError(f"{what} {path} is given {count} times", hint="give each once")

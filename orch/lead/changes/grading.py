"""What grades a change, and why a change cannot grade itself.

The *grading paths* of a run are what decides its checks' verdict beyond the code under test: the protected
globs in force (the spec's `protect:`, by default the tests, every file a test runner discovers or imports by
convention and the runners' configuration: orch.spec.model.DEFAULT_PROTECT) and the files the check commands
name (`sh ci/check.sh`, `python3 -B test_calc.py`: a word of a command that is a file of the base).

Two rules hold them, one at each end:
- **scope** (orch.lead.changes.scope): a change that adds, edits or deletes a grading path its task does not
  `allow:` is out of scope, and never checked;
- **the checks' tree** (`graded_tree`): every check of a change (its gate's, its integration's) runs on
  base + patch with each grading path as it is in the run's base: one the change added is not there, one it
  edited or deleted is the base's. Allowed or not: an `allow:` lets a writer's test land (reviewers see it),
  never decide its own checks. So the checks always judge the change's code against the very tests,
  configuration and scripts the baseline ran (base.checks.json), and a change that grades itself by a path
  scope did not see (a name a glob misses, an `allow:` too wide, a `protect:` list replaced) still does not.

What this cannot hold: the code under test runs inside the test runner's process, so code written to subvert
the runner (exit 0 at import, patching the runner) still can; that is what the reviewers are for.
"""

from __future__ import annotations

import functools
import posixpath
import shlex
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

from orch.lead.changes.gitcmd import git, out
from orch.lead.changes.repo import RunRepo


def matches(path: str, glob: str) -> bool:
    """Whether a tree path (from the root, `/`-separated) matches a protect/allow glob, with gitignore's rules
    (pathspec): `**` spans folders, `*` and `?` stay within one, a glob without `/` matches the name at any
    depth, a glob with one is anchored at the root. A newline in a name is one more character (pathspec's
    patterns are regular expressions whose `.` stops at a newline: `a\\nb/test_x.py` escaped every glob)."""
    return _spec(glob).match_file(path.replace("\n", "\0"))


@functools.lru_cache(maxsize=512)
def _spec(glob: str) -> pathspec.GitIgnoreSpec:
    return pathspec.GitIgnoreSpec.from_lines([glob])


@dataclass(frozen=True)
class Grading:
    """A run's grading paths: globs (matched from the tree's root and from the workdir `subdir`) and files."""

    globs: tuple[str, ...]
    scripts: frozenset[str] = field(default_factory=frozenset)
    """Tree paths a check command names (`check_scripts`)."""
    subdir: str = ""

    @classmethod
    def of(cls, repo: RunRepo, protect: Sequence[str], checks: Sequence[str]) -> Grading:
        """The run's grading paths: `protect` (the globs in force) and the base's files its checks name."""
        return cls(tuple(protect), check_scripts(checks, repo.files(repo.base), repo.subdir), repo.subdir)

    def names(self, path: str) -> list[str]:
        """`path` as the globs see it: from the tree's root, and from the workdir when it is below it."""
        prefix = f"{self.subdir.strip('/')}/" if self.subdir else ""
        return [path] + ([path[len(prefix) :]] if prefix and path.startswith(prefix) else [])

    def why(self, path: str) -> str | None:
        """The protected glob `path` matches, or that a check names it; None for code under test."""
        hit = next((g for g in self.globs for name in self.names(path) if matches(name, g)), None)
        if hit is None and path in self.scripts:
            return "a check runs it"
        return hit


def check_scripts(checks: Sequence[str], files: Sequence[str], subdir: str = "") -> frozenset[str]:
    """The files of the base (`files`, tree paths) that a check command names: each word of the command (and
    what follows a `=` in it: `--rcfile=ci/lintrc`), as a path from where the checks start (`subdir`).
    Only what a command names: what a named script runs in turn is the spec's to protect."""
    present = set(files)
    found = set()
    for command in checks:
        try:
            words = shlex.split(command, comments=True)
        except ValueError:  # unbalanced quotes: sh will refuse it too; its plain words still count
            words = [word.strip("'\"") for word in command.split()]
        for word in words:
            for part in {word, word.partition("=")[2]}:
                if not part or part.startswith("-"):
                    continue
                path = posixpath.normpath(posixpath.join(subdir, part))
                if path in present:
                    found.add(path)
    return frozenset(found)


# diff-tree's raw records: ":<old mode> <new mode> <old sha> <new sha> <status>" NUL "<path>" NUL.
RAW = ("diff-tree", "-r", "-z", "--raw", "--no-renames", "--full-index", "--no-abbrev")


def graded_tree(repo: RunRepo, tree: str, rules: Grading) -> str:
    """`tree` with every grading path as in the run's base (added ones removed, edited or deleted ones
    restored): the tree the checks of a change run on. Only paths that differ from the base are looked at."""
    raw = git(repo.git_dir, *RAW, repo.tree_of(repo.base), tree).stdout.split(b"\0")
    removed, restored = [], []
    for meta, name in zip(raw[0::2], raw[1::2], strict=False):
        if not meta.startswith(b":"):
            continue
        path = name.decode(errors="surrogateescape")
        if rules.why(path) is None:
            continue
        old_mode, _, old_sha, *_ = meta[1:].split()
        if int(old_mode, 8) == 0:  # added by the change (or after the base): not in the checks' tree
            removed.append(b"0 " + b"0" * len(old_sha) + b"\t" + name + b"\0")
        else:
            restored.append(old_mode + b" " + old_sha + b"\t" + name + b"\0")
    if not removed and not restored:
        return tree
    with tempfile.TemporaryDirectory(prefix="orch-graded-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(repo.git_dir, "read-tree", tree, env=env)
        # Removals first: a path that was a file in the base and a folder now (or the reverse) comes back whole.
        index_info = ("update-index", "-z", "--replace", "--index-info")
        git(repo.git_dir, *index_info, env=env, input=b"".join(removed + restored))
        return out(repo.git_dir, "write-tree", env=env)

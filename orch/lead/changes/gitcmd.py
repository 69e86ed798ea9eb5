"""git as the controller runs it: its own git dir and configuration, never a worker's.

Every call goes through `git()`: GIT_DIR is given explicitly (never discovered from a folder a worker can
write), no system or global configuration is read, hooks and fsmonitor are off, and no pager, editor,
credential helper or terminal prompt can start. `$GIT_DIR/info/attributes` (the highest-precedence
attributes) of the run's repository unsets every content conversion, so a `.gitattributes` a worker wrote
cannot make git run a filter or rewrite bytes.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from orch.errors import OrchError

# Wins over any .gitattributes in a tree: no eol or encoding conversion, no ident, no filter driver.
NEUTRAL_ATTRIBUTES = "* -text !eol -ident -filter -working-tree-encoding\n"
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
# Configuration every controller git call runs with (on top of the repository's own, which orch wrote).
SAFE_CONFIG = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "core.autocrlf=false",
    "core.symlinks=true",
    "core.quotePath=false",
    "core.attributesFile=/dev/null",
    "core.excludesFile=/dev/null",
    "core.pager=cat",
    "credential.helper=",
    "protocol.file.allow=always",
    "safe.directory=*",
    "gc.auto=0",
    "user.name=orch",
    "user.email=orch@localhost",
    "commit.gpgSign=false",
    "diff.external=",
    "diff.noprefix=false",
    "diff.mnemonicPrefix=false",
    "diff.renames=false",
    "advice.detachedHead=false",
)


class GitError(OrchError):
    """A git command the controller ran failed (its stderr's last lines are the message)."""

    def __init__(self, args: Sequence[str], code: int, stderr: str) -> None:
        tail = " ".join(stderr.strip().splitlines()[-3:]) or f"exit {code}"
        super().__init__(f"git {' '.join(args[:3])}: {tail}")
        self.code, self.stderr = code, stderr


def git_env(git_dir: Path | None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a controller git call: nothing from the user's or a worker's git setup."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        {
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ASKPASS": "true",
            "GIT_OPTIONAL_LOCKS": "0",
            "GIT_ATTR_NOSYSTEM": "1",
            "GIT_PAGER": "cat",
            "GIT_EDITOR": "true",
            "LC_ALL": "C",
        }
    )
    if git_dir is not None:
        env["GIT_DIR"] = str(git_dir)
    env.update(extra or {})
    return env


def git(
    git_dir: Path | None,
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """Run git with the controller's configuration; GitError (with stderr) when it fails and `check`."""
    argv = ["git"]
    for item in SAFE_CONFIG:
        argv += ["-c", item]
    argv += args
    done = subprocess.run(
        argv,
        cwd=cwd or (git_dir if git_dir is not None else None),
        env=git_env(git_dir, env),
        input=input,
        capture_output=True,
        check=False,
        stdin=subprocess.DEVNULL if input is None else None,
    )
    if check and done.returncode != 0:
        raise GitError(list(args), done.returncode, done.stderr.decode(errors="replace"))
    return done


def out(
    git_dir: Path | None,
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
) -> str:
    """A git command's stdout as text, stripped."""
    return git(git_dir, *args, cwd=cwd, env=env, input=input).stdout.decode(errors="replace").strip()


def patch_id(patch: bytes) -> str | None:
    """`git patch-id --stable` of a patch (None for an empty one): equal for the same edits at other line
    numbers or with other context."""
    if not patch.strip():
        return None
    text = git(None, "patch-id", "--stable", input=patch, cwd=Path("/")).stdout.decode().split()
    return text[0] if text else None

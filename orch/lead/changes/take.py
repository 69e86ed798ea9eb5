"""Taking a writer's change: the controller copies the worktree (so a process the worker left behind cannot
alter what is diffed), refuses what must not be taken, hashes the copy into the run's repository with its
own git dir and configuration, and writes `changes/<job>/` (patch.diff, diffstat.txt, summary.md,
change.json). The worker hands nothing over; its files are only read, never executed or trusted as git
metadata.
"""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from orch.errors import NotFoundError
from orch.jobs.changes import Change
from orch.lead.changes import links
from orch.lead.changes.gitcmd import GitError, git, out, patch_id
from orch.lead.changes.repo import RunRepo
from orch.run.files import atomic_write, read_model

MAX_FILE_BYTES = 1 << 20
MAX_FILES = 100_000


@dataclass
class Snapshot:
    """What copy_tree took: the copy's root, and what it refused or left out."""

    root: Path
    files: int = 0
    refused: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)


def copy_tree(src: Path, dest: Path, max_file_bytes: int = MAX_FILE_BYTES, max_files: int = MAX_FILES) -> Snapshot:
    """Copy the worktree `src` into `dest` (an existing empty folder the controller owns), through folder
    file descriptors and never following a link, so a worker swapping a folder for a link meanwhile gains
    nothing. Kept: regular files (with their executable bit), folders, symlinks (as they are: take_change
    judges where they lead). Refused (named in `refused`, not copied): files over the cap, hard links, special
    files. Left out (`ignored`): `.git` entries. Over `max_files`: refused whole."""
    snap = Snapshot(dest)
    try:
        top = os.open(src, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        snap.refused.append(f".: the worktree cannot be read ({exc.strerror})")
        return snap
    try:
        _copy_dir(top, dest, "", snap, max_file_bytes, max_files)
    finally:
        os.close(top)
    return snap


def _copy_dir(fd: int, dest: Path, rel: str, snap: Snapshot, cap: int, max_files: int) -> None:
    with os.scandir(fd) as entries:
        names = sorted((e.name, e) for e in entries)
    for name, entry in names:
        path = f"{rel}{name}"
        if snap.files >= max_files:
            if not any(r.startswith("*") for r in snap.refused):
                snap.refused.append(f"*: more than {max_files} files")
            return
        st = entry.stat(follow_symlinks=False)
        if name == ".git":
            snap.ignored.append(f"{path}: git metadata the worker made (never read or run)")
            continue
        if stat.S_ISLNK(st.st_mode):  # copied as it is, never followed; where it leads: links.problems
            os.symlink(os.readlink(name, dir_fd=fd), dest / name)
            snap.files += 1
        elif stat.S_ISDIR(st.st_mode):
            try:
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                snap.refused.append(f"{path}/: cannot be read ({exc.strerror})")
                continue
            try:
                (dest / name).mkdir()
                _copy_dir(sub, dest / name, f"{path}/", snap, cap, max_files)
            finally:
                os.close(sub)
        elif stat.S_ISREG(st.st_mode):
            problem = _copy_file(fd, name, dest / name, cap)
            if problem:
                snap.refused.append(f"{path}: {problem}")
            else:
                snap.files += 1
        else:
            snap.refused.append(f"{path}: not a regular file, folder or link")


def _copy_file(fd: int, name: str, dest: Path, cap: int) -> str | None:
    try:
        src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    try:
        st = os.fstat(src)
        if not stat.S_ISREG(st.st_mode):
            return "replaced by something else than a file while it was copied"
        if st.st_nlink > 1:
            return "a hard link (a file the worker did not write may be behind it)"
        if st.st_size > cap:
            return f"{st.st_size} bytes, over the cap of {cap}"
        mode = 0o755 if st.st_mode & 0o100 else 0o644
        out_fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        copied = 0
        with os.fdopen(out_fd, "wb") as fh:
            while chunk := os.read(src, 1 << 20):
                copied += len(chunk)
                if copied > cap:
                    fh.close()
                    dest.unlink()
                    return f"grew over the cap of {cap} bytes while it was copied"
                fh.write(chunk)
        return None
    finally:
        os.close(src)


def take_change(
    repo: RunRepo,
    worktree: Path,
    base: str,
    job: str,
    summary: str,
    *,
    task: str = "",
    writer: int = 0,
    agent: str = "",
    max_file_bytes: int = MAX_FILE_BYTES,
    max_files: int = MAX_FILES,
) -> Change:
    """Snapshot `worktree` (the job's worktree, a checkout of `base`), diff it against `base` and write
    `changes/<job>/`. Refusals (a symlink leading out of the tree or into a `.git`, followed through the tree's
    other links: orch.lead.changes.links; a file over `max_file_bytes`, a special file, a hard link) are listed
    in `Change.refused` (the gate rejects such a change for scope); `.git` entries the worker made are left out
    (`Change.ignored`). A missing or unreadable worktree gives an empty change with the reason in `refused`."""
    folder = repo.run.change_dir(job)
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="orch-take-") as tmp:
        copy = Path(tmp) / "tree"
        copy.mkdir()
        snap = copy_tree(worktree, copy, max_file_bytes, max_files)
        tree = None
        if not snap.refused or snap.files:
            try:
                tree = hash_tree(repo, copy, base)
            except GitError as exc:  # a path git refuses to store (`.GIT`, `git~1`, ...): named, not taken
                snap.refused.append(f"*: git refused the tree: {exc.message}")
    if tree is not None:  # each link followed through the others, as a checkout of the tree would
        snap.refused += links.problems(repo, tree, base)
    patch = b""
    files: list[str] = []
    stat_line = ""
    if tree is not None:
        base_tree = repo.tree_of(base)
        patch = git(repo.git_dir, "diff-tree", *PATCH_OPTS, base_tree, tree).stdout
        raw = git(repo.git_dir, "diff-tree", *DIFF_OPTS, "--name-only", "-z", base_tree, tree).stdout
        files = [p.decode(errors="surrogateescape") for p in raw.split(b"\0") if p]
        stat_text = out(repo.git_dir, "diff-tree", *DIFF_OPTS, "--stat=200", base_tree, tree)
        atomic_write(repo.run.change_diffstat(job), stat_text + "\n")
        stat_line = stat_text.splitlines()[-1].strip() if stat_text else ""
    atomic_write(repo.run.change_patch(job), patch)
    atomic_write(repo.run.change_summary(job), summary.rstrip() + "\n")
    change = Change(
        job=job,
        task=task,
        writer=writer,
        agent=agent,
        base=base,
        tree=tree,
        files=files,
        diffstat=stat_line,
        patch_id=patch_id(patch),
        refused=snap.refused,
        ignored=snap.ignored,
        summary=summary,
    )
    atomic_write(repo.run.change_record(job), change.model_dump_json(indent=2) + "\n")
    return change


# Plain patches: no renames guessed, no textconv or external diff, full blob ids (git apply --3way needs them).
DIFF_OPTS = ("-r", "--no-renames", "--no-textconv", "--no-ext-diff", "--no-color")
PATCH_OPTS = (*DIFF_OPTS, "--binary", "--full-index")


def hash_tree(repo: RunRepo, copy: Path, base: str) -> str:
    """The git tree of the copy: a private index from `base`, every file hashed as is (the run repository's
    neutral attributes: no filter or conversion), the copy's .gitignore files honoured."""
    index = copy.parent / "index"
    env = {"GIT_INDEX_FILE": str(index), "GIT_WORK_TREE": str(copy)}
    git(repo.git_dir, "read-tree", base, env=env)
    git(repo.git_dir, "add", "--all", "--", ".", cwd=copy, env=env)
    return out(repo.git_dir, "write-tree", env=env)


def patch_path(repo: RunRepo, job: str) -> Path:
    """changes/<job>/patch.diff."""
    return repo.run.change_patch(job)


def load_change(repo: RunRepo, job: str) -> Change:
    """changes/<job>/change.json as take_change wrote it."""
    return read_model(repo.run.change_record(job), Change, NotFoundError(f"no change taken for {job}"))

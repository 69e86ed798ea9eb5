"""Applying a pass (orch.backends.swarm.passes) to a copy of a run folder: the collector's on the manager, the
user's own, or a new task's restored folder.

A pass carries names a worker chose, so only relative names without `..` are taken, every folder on the way
is made here and entered through no link, files are written under a temporary name then renamed into place,
a tail is appended only where this copy's file ends where the tail starts, and a link is made only when its
target stays inside the folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from orch.backends.swarm.passes import APPEND, DIR_FLAGS, MANIFEST, Applied, Manifest, PassError, inside, open_under


def read_manifest(tar: tarfile.TarFile, life: int | None = None) -> Manifest:
    """The pass's manifest (its first member), checked against the life that may send (None: any)."""
    head = tar.next()
    if head is None or head.name != MANIFEST or not head.isfile():
        raise PassError("not a pass: its first member is not the manifest")
    raw = tar.extractfile(head)
    assert raw is not None
    try:
        manifest = Manifest.model_validate_json(raw.read())
    except ValueError as exc:
        raise PassError(f"a malformed manifest: {exc}") from None
    if life is not None and manifest.life != life:
        raise PassError(f"a pass of life {manifest.life}, not of the current life {life}")
    return manifest


def apply_pass(
    root: Path, source: IO[bytes], life: int | None = None, divert: Callable[[str], bool] | None = None
) -> Applied:
    """Apply a whole pass (`source`, rewound) to the copy at `root`: checked whole first (a torn or foreign
    pass changes nothing), then deletions, then each member. `divert`: names the caller takes itself
    (never written here: `Applied.changed` lists them, their content left in the tar)."""
    root.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(fileobj=source, mode="r:") as tar:
            manifest = read_manifest(tar, life)
            members = tar.getmembers()[1:]
    except tarfile.TarError as exc:
        raise PassError(f"a torn or malformed pass: {exc}") from None
    end = source.seek(0, os.SEEK_END)
    if len(members) != manifest.members or any(m.offset_data + m.size > end for m in members):
        raise PassError(f"a torn pass: {len(members)} of its {manifest.members} members, or one cut short")
    done = Applied()
    source.seek(0)
    root_fd = os.open(root, DIR_FLAGS)
    try:
        for rel in manifest.deleted:
            if _name_ok(rel) and _remove(root_fd, rel):
                done.deleted.append(rel)
        with tarfile.open(fileobj=source, mode="r:") as tar:
            for member in tar:
                if member.name == MANIFEST:
                    continue
                rel = member.name
                if not _name_ok(rel):
                    done.refused.append(rel)
                elif divert is not None and divert(rel):
                    done.changed.append(rel)
                else:
                    _take(root_fd, tar, member, done)
    finally:
        os.close(root_fd)
    return done


def _name_ok(rel: str) -> bool:
    parts = rel.split("/")
    return bool(rel) and "\0" not in rel and not rel.startswith("/") and all(p not in ("", ".", "..") for p in parts)


def _take(root_fd: int, tar: tarfile.TarFile, member: tarfile.TarInfo, done: Applied) -> None:
    rel = member.name
    parent, _, leaf = rel.rpartition("/")
    try:
        fd = _folder(root_fd, parent)
    except OSError:
        done.refused.append(rel)  # a path through a link (or a file where a folder goes)
        return
    try:
        if member.isdir():
            _make_dir(fd, leaf, member.mode & 0o777)
        elif member.issym():
            if not inside(rel, member.linkname):
                done.refused.append(rel)
                return
            _replace(fd, leaf, lambda tmp: os.symlink(member.linkname, tmp, dir_fd=fd))
        elif member.isfile():
            data = tar.extractfile(member)
            assert data is not None
            if APPEND in member.pax_headers:
                if not _append(fd, leaf, int(member.pax_headers[APPEND]), data, member.size):
                    done.stale.append(rel)
                    return
            else:
                _replace(fd, leaf, lambda tmp: _write(fd, tmp, data, member))
        else:
            done.refused.append(rel)
            return
        done.changed.append(rel)
    finally:
        if fd != root_fd:
            os.close(fd)


def _folder(root_fd: int, rel: str) -> int:
    """The folder `rel` below `root_fd` (made where missing), reached through no link."""
    if not rel:
        return root_fd
    fd = os.dup(root_fd)
    for part in rel.split("/"):
        try:
            nxt = os.open(part, DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
            nxt = os.open(part, DIR_FLAGS, dir_fd=fd)
        except OSError:
            os.close(fd)
            raise
        os.close(fd)
        fd = nxt
    return fd


def _make_dir(fd: int, leaf: str, mode: int) -> None:
    st = _lstat(fd, leaf)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        os.unlink(leaf, dir_fd=fd)
        st = None
    if st is None:
        os.mkdir(leaf, mode, dir_fd=fd)
    sub = os.open(leaf, DIR_FLAGS, dir_fd=fd)
    try:
        os.fchmod(sub, mode | 0o700)  # this copy's owner keeps its way in
    finally:
        os.close(sub)


def _lstat(fd: int, leaf: str) -> os.stat_result | None:
    try:
        return os.stat(leaf, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _replace(fd: int, leaf: str, make: Callable[[str], None]) -> None:
    """Make `leaf` anew under a temporary name, then rename it over whatever `leaf` was (a folder removed)."""
    tmp = f".{leaf}.orch-{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp, dir_fd=fd)
    make(tmp)
    st = _lstat(fd, leaf)
    if st is not None and stat.S_ISDIR(st.st_mode):
        shutil.rmtree(leaf, dir_fd=fd)
    os.rename(tmp, leaf, src_dir_fd=fd, dst_dir_fd=fd)


def _write(fd: int, name: str, data: IO[bytes], member: tarfile.TarInfo) -> None:
    out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
    with os.fdopen(out, "wb") as dest:
        shutil.copyfileobj(data, dest)
        os.fchmod(out, (member.mode & 0o777) | 0o600)
        os.utime(out, (member.mtime, member.mtime))


def _append(fd: int, leaf: str, offset: int, data: IO[bytes], size: int) -> bool:
    """The tail written after `offset` where this copy's file ends there (already there: nothing to do);
    False where it does not continue this copy."""
    try:
        out = os.open(leaf, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    except OSError:
        return False
    with os.fdopen(out, "wb") as dest:
        st = os.fstat(out)
        if not stat.S_ISREG(st.st_mode):
            return False
        if st.st_size == offset + size:
            return True  # applied before (a pass taken twice)
        if st.st_size != offset:
            return False
        dest.seek(offset)
        shutil.copyfileobj(data, dest)
    return True


def _remove(root_fd: int, rel: str) -> bool:
    parent, _, leaf = rel.rpartition("/")
    try:
        fd = os.dup(root_fd) if not parent else open_under(root_fd, parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False  # its folder is gone (removed with it) or a link: nothing of this copy to remove
    try:
        st = _lstat(fd, leaf)
        if st is None:
            return False
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(leaf, dir_fd=fd)
        else:
            os.unlink(leaf, dir_fd=fd)
        return True
    finally:
        os.close(fd)

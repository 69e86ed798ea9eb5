"""A run folder's changes since its copy elsewhere last took them, as one pass: made here where the run lives
(its swarm task); orch.backends.swarm.receive applies it where the run comes home (the collector on the
manager, then the user's own copy).

A pass is a tar. Its first member, `.orch-pass.json` (`Manifest`), says which life of the run sent it, how
many members follow and which paths went away; then one member per change: a regular file whole, or only
its new tail when it grew in place (its pax header `ORCH.append` holds the offset the tail continues at), a
folder, or a link that stays inside the folder. Sockets, pipes and devices are never sent.

Both ends are hostile ground: a worker writes files, folders and links in the run folder while it is read,
and a pass carries the names it chose. So the sender walks with directory descriptors and opens nothing
through a link (`os.fwalk`, `O_NOFOLLOW` at every step: a folder swapped for a link mid-walk reads nothing),
and the receiver takes only relative names without `..`, creates every folder itself, writes through no
link, and makes a link only when its target stays inside the folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import posixpath
import stat
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from pydantic import Field

from orch.run.records import Strict

MANIFEST = ".orch-pass.json"
APPEND = "ORCH.append"
TAIL_WINDOW = 4096
"""Bytes before a file's old end whose hash says it only grew (an append) rather than being rewritten."""
SPOOL = 8 << 20
"""A pass stays in memory up to this size, then spills to a temporary file."""
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Manifest(Strict):
    life: int
    members: int = Field(ge=0)
    deleted: list[str] = Field(default_factory=list)


@dataclass(frozen=True)
class Seen:
    """What a path was when last sent: a file's identity and size (and the hash of its last bytes), a
    folder, or a link's target."""

    kind: Literal["file", "dir", "link"]
    ino: int = 0
    size: int = 0
    mtime_ns: int = 0
    mode: int = 0
    tail: str = ""
    target: str = ""


Baseline = dict[str, Seen]


@dataclass
class Applied:
    """What a pass did where it was applied."""

    changed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    """Members not taken: a bad name, a link leaving the folder, a path through a link."""
    stale: list[str] = field(default_factory=list)
    """Tails that did not continue this copy's file: the sender must send these files whole."""


class PassError(Exception):
    """A pass that is not one (torn, malformed, of another life): nothing of it was applied."""


# --- the sending side ------------------------------------------------------------------------------
def scan(root: Path) -> dict[str, os.stat_result]:
    """Every folder, regular file and link under `root`, by relative path; walked with directory descriptors
    and never through a link."""
    found: dict[str, os.stat_result] = {}
    for top, dirs, files, fd in os.fwalk(root, follow_symlinks=False):
        rel_top = os.path.relpath(top, root)
        for name in [*dirs, *files]:
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                    found[name if rel_top == "." else f"{rel_top}/{name}"] = st
    return found


def open_under(root_fd: int, rel: str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """`rel` opened below the folder `root_fd`, one component at a time, none of them a link."""
    *parents, leaf = rel.split("/")
    fd = os.dup(root_fd)
    try:
        for part in parents:
            nxt = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return os.open(leaf, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
    finally:
        os.close(fd)


def _tail_hash(fd: int, end: int) -> str:
    start = max(0, end - TAIL_WINDOW)
    return hashlib.sha256(os.pread(fd, end - start, start)).hexdigest()


def make_pass(
    root: Path, baseline: Baseline, life: int, first: Sequence[str] = (), skip: Callable[[str], bool] | None = None
) -> tuple[IO[bytes], Baseline, int]:
    """The changes under `root` since `baseline`, as a pass (rewound, ready to send), the baseline once it is
    taken, and how many members it carries (0: nothing changed).

    `first`: paths (or folders) read before the rest: what points at other files (the controller's state, a
    repository's refs), so that what they name was written before they were read. `skip`: paths never sent.
    """
    now = {rel: st for rel, st in scan(root).items() if skip is None or not skip(rel)}
    ordered = sorted(now, key=lambda rel: (not any(rel == p or rel.startswith(p + "/") for p in first), rel))
    out = tempfile.SpooledTemporaryFile(max_size=SPOOL)  # noqa: SIM115 (the caller sends and closes it)
    taken: Baseline = {}
    members: list[tuple[tarfile.TarInfo, IO[bytes] | None]] = []
    root_fd = os.open(root, DIR_FLAGS)
    try:
        for rel in ordered:
            entry = _member(root_fd, rel, now[rel], baseline.get(rel))
            if entry is None:  # gone, or turned into something else, since the scan: the next pass sees it
                if rel in baseline:
                    taken[rel] = baseline[rel]
                continue
            seen, member = entry
            taken[rel] = seen
            if member is not None:
                members.append(member)
    finally:
        os.close(root_fd)
    deleted = sorted(rel for rel in baseline if rel not in taken)
    manifest = Manifest(life=life, members=len(members), deleted=deleted).model_dump_json().encode()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        head = tarfile.TarInfo(MANIFEST)
        head.size = len(manifest)
        tar.addfile(head, io.BytesIO(manifest))
        for info, data in members:
            tar.addfile(info, data)
            if data is not None:
                data.close()
    out.seek(0)
    return out, taken, len(members) + len(deleted)


def _member(
    root_fd: int, rel: str, st: os.stat_result, old: Seen | None
) -> tuple[Seen, tuple[tarfile.TarInfo, IO[bytes] | None] | None] | None:
    """What `rel` is now and the member that brings a copy up to it (None: the copy has it already);
    None when it changed under the reader."""
    info = tarfile.TarInfo(rel)
    info.mtime = st.st_mtime
    info.mode = stat.S_IMODE(st.st_mode) & 0o777
    if stat.S_ISDIR(st.st_mode):
        seen = Seen("dir", mode=info.mode)
        info.type = tarfile.DIRTYPE
        return seen, (None if old == seen else (info, None))
    if stat.S_ISLNK(st.st_mode):
        try:
            target = _readlink(root_fd, rel)
        except OSError:
            return None
        if not inside(rel, target):
            return None  # a link out of the folder is never sent (nor anything through it: the walk follows none)
        seen = Seen("link", target=target)
        info.type, info.linkname = tarfile.SYMTYPE, target
        return seen, (None if old == seen else (info, None))
    try:
        fd = open_under(root_fd, rel, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as src:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or now.st_ino != st.st_ino:
            return None
        size = now.st_size
        seen = Seen("file", now.st_ino, size, now.st_mtime_ns, info.mode, _tail_hash(fd, size))
        if old is not None and (old.ino, old.size, old.mtime_ns, old.mode) == (
            seen.ino,
            size,
            seen.mtime_ns,
            seen.mode,
        ):
            return seen, None
        grew = (
            old is not None
            and old.kind == "file"
            and old.ino == seen.ino
            and old.mode == seen.mode
            and size > old.size
            and _tail_hash(fd, old.size) == old.tail
        )
        start = old.size if grew and old is not None else 0
        data = tempfile.SpooledTemporaryFile(max_size=SPOOL)  # noqa: SIM115 (closed once in the pass)
        src.seek(start)
        info.size = _copy(src, data, size - start)
        if info.size != size - start:  # cut shorter while read: the next pass sends what it then is
            data.close()
            return None
        data.seek(0)
        if grew:
            info.pax_headers = {APPEND: str(start)}
        return seen, (info, data)


def _same(old: Seen, now: Seen) -> bool:
    """Unchanged: the same file (inode), size, modification time and mode (the hash is not needed then)."""
    return (old.ino, old.size, old.mtime_ns, old.mode) == (now.ino, now.size, now.mtime_ns, now.mode)


def _readlink(root_fd: int, rel: str) -> str:
    parent, _, leaf = rel.rpartition("/")
    if not parent:
        return os.readlink(leaf, dir_fd=root_fd)
    fd = open_under(root_fd, parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return os.readlink(leaf, dir_fd=fd)
    finally:
        os.close(fd)


def _copy(src: IO[bytes], out: IO[bytes], count: int) -> int:
    """At most `count` bytes of `src` into `out` (a file that grew meanwhile is cut where it was seen)."""
    left = count
    while left > 0:
        chunk = src.read(min(left, 1 << 20))
        if not chunk:
            break
        out.write(chunk)
        left -= len(chunk)
    return count - left


def inside(rel: str, target: str) -> bool:
    """Whether a link at `rel` pointing at `target` stays inside the folder."""
    if not target or target.startswith("/") or "\0" in target:
        return False
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    return joined != ".." and not joined.startswith("../") and not joined.startswith("/")


def baseline_of(root: Path) -> Baseline:
    """The baseline of a copy just made (a restore): a pass from it carries only what changed after."""
    _, taken, _ = make_pass(root, {}, 0)
    return taken

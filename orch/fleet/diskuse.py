"""What each worker wrote, and the run folder's size: the caps watchdog's walk (orch.fleet.watchdog).

Everything a worker writes counts as its bytes written, wherever it is: its files in the run folder (and, with
a uid each, in the container's tmpfs /tmp, /dev/shm and home, told by their owner), what its local sandbox's
own tmpfs hold (orch.run.paths.SANDBOX_TMPFS: memory, read through a process of its sandbox), and the files its
processes hold open with no name any more (a memfd, a deleted file: orch.procs.held_files).

The walk's own work is bounded per worker, never across workers: past MAX_FILES files a worker is over its
disk cap by that alone (`files`), and the walk goes no further into what is its. So a worker making files by the
hundred thousand never stops another's (or its own big files') being measured: the walk once stopped after
200,000 files in all, whoever's they were.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from orch import procs
from orch.fleet.caps import MAX_FILES
from orch.fleet.confinement import Confinement
from orch.run.folder import RunFolder
from orch.run.paths import SANDBOX_TMPFS
from orch.run.uids import worker_of


@dataclass
class DiskLook:
    """One walk: each worker's bytes written and files, and the run folder's size."""

    written: dict[int, int]
    files: dict[int, int]
    folder: int = 0
    over: set[int] = field(default_factory=set)
    """Workers past MAX_FILES: the walk measured no further into what is theirs."""


def worker_areas(run: RunFolder, n: int) -> list[Path]:
    """Where worker n writes in the run folder (shared isolation: files there tell no uid), and its
    transcript, which tmux writes as the run's uid but whose bytes the worker's screen decides."""
    return [run.outbox(n), run.sessions(n), run.config_dir(n), run.state(n), run.log(n)]


def measure_disk(
    run: RunFolder,
    workers: Iterable[int],
    confinement: Confinement,
    processes: Mapping[int, set[int]] | None = None,
) -> DiskLook:
    """What each worker wrote, and the run folder's total. With a uid each (the confinement's `own_uids`) a file's
    owner says whose it is, wherever the worker could write (the run folder, and its `scratch`: the container's
    tmpfs, its home); otherwise where it lies does. `processes`: each worker's processes now
    (orch.fleet.workerprocs), for its sandbox's tmpfs and the unnamed files it holds."""
    wanted = list(workers)
    look = DiskLook(dict.fromkeys(wanted, 0), dict.fromkeys(wanted, 0))
    strict = confinement.own_uids
    areas = {n: [str(p) for p in worker_areas(run, n)] for n in wanted}
    transcripts = {str(run.log(n)): n for n in wanted}

    def whose(path: str, owner: int) -> int | None:
        if strict:
            return worker_of(owner) or transcripts.get(path)
        return next((n for n, pre in areas.items() if any(path == p or path.startswith(p + os.sep) for p in pre)), None)

    seen: set[tuple[int, int]] = set()
    roots = [run.root, *confinement.scratch()]
    for root in roots:
        for path, owner, size in _walk(root, seen, lambda path, owner: whose(path, owner) not in look.over):
            if root == run.root:
                look.folder += size
            n = whose(path, owner)
            if n in look.written:
                look.written[n] += size
                look.files[n] += 1
                if look.files[n] > MAX_FILES:
                    look.over.add(n)
    for n, pids in (processes or {}).items():
        if n in look.written:
            look.written[n] += _memory_backed(pids)
    return look


def _memory_backed(pids: set[int]) -> int:
    """What a worker's processes hold in memory as files: its local sandbox's own tmpfs (read through a process
    in its mount namespace: a worker with none shares the controller's), and the unnamed files they keep open."""
    outside = procs.mount_namespace(os.getpid())
    inside = next((p for p in pids if procs.mount_namespace(p) not in (None, outside)), None)
    used, devices = procs.mounts_used(inside, SANDBOX_TMPFS) if inside is not None else (0, set())
    return used + procs.held_files(pids, devices)


def _walk(
    root: Path, seen: set[tuple[int, int]], descend: Callable[[str, int], bool]
) -> Iterable[tuple[str, int, int]]:
    """(path, owner, bytes allocated) of every file and folder under root, links never followed, each inode once
    (hard links); a folder is read only while `descend(path, owner)` says so, asked when its turn comes and again
    after each entry (a worker past its count stops the reading of its own folder at once)."""
    stack = [(str(root), -1)]
    while stack:
        folder, owner = stack.pop()
        mine = owner >= 0
        if mine and not descend(folder, owner):
            continue
        try:
            for entry in _entries(folder):
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                key = (st.st_dev, st.st_ino)
                if key in seen:
                    continue
                seen.add(key)
                if entry.is_dir(follow_symlinks=False):
                    stack.append((entry.path, st.st_uid))
                yield entry.path, st.st_uid, st.st_blocks * 512
                if mine and not descend(folder, owner):
                    break
        except OSError:
            continue


def _entries(folder: str) -> Iterator[os.DirEntry[str]]:
    """A folder's entries, read as they come; a folder of this uid's that its owner may not read (a worker sharing
    the uid made it so, to hide what it holds) is made readable to it first."""
    try:
        found = os.scandir(folder)
    except PermissionError:
        st = os.lstat(folder)
        if st.st_uid != os.geteuid() or not stat.S_ISDIR(st.st_mode):
            raise
        os.chmod(folder, st.st_mode | stat.S_IRUSR | stat.S_IXUSR)
        found = os.scandir(folder)
    with found:
        yield from found

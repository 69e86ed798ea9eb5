"""What each worker wrote, and the run folder's size: the caps watchdog's walk (orch.fleet.watchdog)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from orch import settings
from orch.fleet.caps import own_uids
from orch.run.folder import RunFolder
from orch.run.records import RunInfo
from orch.run.uids import worker_of

MAX_FILES = 200_000
"""Files walked per look; a worker that makes more is past its disk cap in another way."""


def worker_areas(run: RunFolder, n: int) -> list[Path]:
    """Where worker n writes in the run folder (shared isolation: files there tell no uid), and its
    transcript, which tmux writes as the run's uid but whose bytes the worker's screen decides."""
    return [run.outbox(n), run.sessions(n), run.config_dir(n), run.state(n), run.log(n)]


def measure_disk(run: RunFolder, info: RunInfo, workers: Iterable[int]) -> tuple[dict[int, int], int]:
    """Bytes each worker wrote, and the run folder's total. With a uid each (own_uids) a file's owner says
    whose it is, wherever the worker could write (the run folder, its home's tmpfs, /tmp); otherwise where
    it lies does."""
    wanted = list(workers)
    per = dict.fromkeys(wanted, 0)
    strict = own_uids(info)
    areas = {n: [str(p) for p in worker_areas(run, n)] for n in wanted}
    transcripts = {str(run.log(n)): n for n in wanted}
    total = 0
    seen: set[tuple[int, int]] = set()
    roots = [run.root] + (
        [Path("/tmp"), Path(os.environ.get("HOME", "/"))] if strict and settings.IN_CONTAINER.get() else []
    )
    for root in roots:
        for counted, (path, st_uid, size) in enumerate(_walk(root, seen), 1):
            if root == run.root:
                total += size
            if strict:
                n = worker_of(st_uid) or transcripts.get(path)
                if n in per:
                    per[n] += size
            else:
                for n, prefixes in areas.items():
                    if any(path == p or path.startswith(p + os.sep) for p in prefixes):
                        per[n] += size
                        break
            if counted >= MAX_FILES:
                break
    return per, total


def _walk(root: Path, seen: set[tuple[int, int]]) -> Iterable[tuple[str, int, int]]:
    """(path, owner, bytes allocated) of every file and folder under root, links never followed, each
    inode once (hard links)."""
    stack = [str(root)]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if key in seen:
                continue
            seen.add(key)
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            yield entry.path, st.st_uid, st.st_blocks * 512

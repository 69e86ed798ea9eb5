"""orch.container.owners: a run folder whose `model/` and workers' folders are other uids' is removed by
the run's uid holding only what a container's strict run holds (SETUID, SETGID, SETPCAP, ambient): each
folder emptied as its owner, links never followed (compose's `fleet` whose first launch failed). Without
those capabilities the other uids' files stay. Needs root to give the files to those uids."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from orch.container.owners import foreign_folders
from orch.run.uids import SWITCH_CAPS, drop_argv, worker_uid

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give files to other uids")
RUN_UID, GATEWAY_UID = 1000, 61000
REMOVE = "import sys; from pathlib import Path; from orch.container.owners import remove_as_owners; " \
    "remove_as_owners(Path(sys.argv[1]))"  # fmt: skip


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder every uid may pass (pytest's own tmp_path is root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="orch-owners-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def _run_folder(base: Path) -> tuple[Path, Path]:
    """A run folder as a failed first start leaves it: the run's, with `model/` the gateway's and worker 1's
    session store (0700) its own, a link in it pointing out at a file that must survive."""
    outside = base / "keep.txt"
    outside.write_text("not the run's")
    root = base / "runs" / "run"
    for path, uid, mode in [
        (root.parent, RUN_UID, 0o755),
        (root, RUN_UID, 0o755),
        (root / "model", GATEWAY_UID, 0o755),
        (root / "model" / "recording", GATEWAY_UID, 0o755),
        (root / "sessions", RUN_UID, 0o755),
        (root / "sessions" / "agent-1", worker_uid(1), 0o700),
    ]:
        path.mkdir()
        os.chown(path, uid, uid)
        path.chmod(mode)
    for path, uid in [
        (root / "run.json", RUN_UID),
        (root / "model" / "usage.json", GATEWAY_UID),
        (root / "model" / "recording" / "x.jsonl", GATEWAY_UID),
        (root / "sessions" / "agent-1" / "s.jsonl", worker_uid(1)),
    ]:
        path.write_text("{}")
        os.chown(path, uid, uid)
    link = root / "sessions" / "agent-1" / "out"
    link.symlink_to(outside)
    os.chown(link, worker_uid(1), worker_uid(1), follow_symlinks=False)
    return root, outside


def _remove_as_run_uid(root: Path, keep: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    argv = [*drop_argv(RUN_UID, RUN_UID, keep), sys.executable, "-c", REMOVE, str(root)]
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def test_other_uids_folders_are_found_top_most_only(base: Path) -> None:
    root, _ = _run_folder(base)
    assert sorted(foreign_folders(root, RUN_UID)) == [
        (GATEWAY_UID, root / "model"),
        (worker_uid(1), root / "sessions" / "agent-1"),
    ]


def test_a_strict_runs_uid_removes_the_whole_folder_as_each_owner(base: Path) -> None:
    root, outside = _run_folder(base)
    done = _remove_as_run_uid(root, SWITCH_CAPS)
    assert done.returncode == 0, done.stderr
    assert not root.exists()
    assert outside.read_text() == "not the run's"  # the link was removed, not followed


def test_without_the_capabilities_the_other_uids_files_stay(base: Path) -> None:
    root, _ = _run_folder(base)
    done = _remove_as_run_uid(root, ())
    assert done.returncode != 0 and "OSError" in done.stderr, done.stderr
    assert (root / "model" / "usage.json").exists()

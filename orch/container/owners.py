"""Who owns what in a container run's folder, set by the init while it is still root: the gateway's
`model/`, each worker's own files under strict isolation, and a previous run of the name cleared away.

The run folder is on a volume the run's uid writes, so nothing here follows a link planted in it: a link
found where a file or folder of the run should be is removed, never followed.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from orch.container.layout import run_mount
from orch.run.folder import RunFolder
from orch.run.paths import pane_sockets_dir
from orch.run.records import RunInfo
from orch.run.uids import drop_argv, worker_uid


def _own(path: Path, uid: int, gid: int, mode: int) -> None:
    """Give one path (never followed if it is a link: a planted link is removed) to uid:gid with `mode`."""
    if path.is_symlink():
        path.unlink()
        return
    os.chown(path, 0, 0)  # root's for a moment: changing another uid's mode would need FOWNER
    os.chmod(path, mode)
    os.chown(path, uid, gid)


def _own_tree(root: Path, uid: int, gid: int, mode: int) -> None:
    """`root` (a folder) and everything under it to uid:gid; files keep their own mode."""
    root.mkdir(parents=True, exist_ok=True)
    for path in [*root.rglob("*")]:
        if path.is_symlink():
            os.chown(path, uid, gid, follow_symlinks=False)
        else:
            os.chown(path, uid, gid)
    _own(root, uid, gid, mode)


def own_model_dir(run: RunFolder, gw_uid: int) -> None:
    """`model/` and everything in it belong to the gateway's uid: dirs 0755, files 0644 (the workers read
    usage, ledger and recordings; only the gateway writes). A resumed run's earlier files included."""
    model = run.model_dir
    model.mkdir(exist_ok=True)
    for path in [model, *model.rglob("*")]:
        if path.is_symlink():  # never follow a link someone planted: drop it
            path.unlink()
            continue
        _own(path, gw_uid, gw_uid, 0o755 if path.is_dir() else 0o644)


def run_folder(name: str, uid: int, gid: int) -> RunFolder:
    """The run's folder with its logs/, made for the run's uid if missing (compose's first start: the
    controller makes the rest, RunFolder.create)."""
    run = RunFolder(Path(run_mount(name)))
    for folder in (run.root, run.logs_dir):
        if not folder.exists():
            folder.mkdir(mode=0o755)
            os.chown(folder, uid, gid)
    return run


def remove_run(name: str) -> None:
    """The run folder of `name` gone, whoever's its files are (the gateway's `model/`, each worker's outbox
    and sessions under strict isolation: the run's uid could not remove them). A link in its place is
    removed, not followed; shutil.rmtree follows none below it (it works on descriptors)."""
    root = Path(run_mount(name))
    if root.is_symlink() or root.is_file():
        root.unlink()
    elif root.is_dir():
        shutil.rmtree(root)


def isolate_workers(run: RunFolder, info: RunInfo, uid: int, gid: int) -> None:
    """Strict isolation, while the init still may: each worker's own files become its uid's, and nothing
    else of the run is writable by any worker.

    - `outbox/agent-N/`: worker N's, group the run's gid and group-writable, so the controller can clear a
      finished job's files; other workers only read it. Its hook log `state/agent-N.jsonl` and its agent
      session store `sessions/agent-N` (resume) are its own too.
    - its config dir (on the tmpfs home: it holds the worker's gateway token): created empty, 0710 with the
      run's gid, so no other worker may enter it and the controller may only look up a name in it (an
      adapter's ready marker: Codex, opencode and aider touch one there once their TUI takes input); the
      worker seeds it itself when its pane starts (orch.fleet.become).
    - `worktrees/agent-N/` (a run with writers): the run's uid's, group worker N's, 2750: worker N may enter it,
      no other worker may, and nobody but the controller may make anything in it. Each writer job's worktree is
      a folder the controller makes there (0770: worker N writes in it through its group), holding worker N's
      own files; a worker cannot plant anything where its next job's worktree goes.
    - the home and the folders above the config dirs: the run's uid's, 0711 (passable, not listable).
    - `pane-N/` in orch.run.paths.pane_sockets_dir (on the container's /tmp): the run's uid's, group worker
      N's, 0710, so worker N alone may enter it and reach the relay's socket for its own pane there
      (orch.backends.local.relay, for aider's watcher and Gemini's approver); its parents the run's uid's, 0711.
    """
    home = Path(os.environ.get("HOME", "/home/worker"))
    for folder in (home, *reversed(run.config_root.parents), run.config_root):
        if folder == home or home in folder.parents:
            folder.mkdir(exist_ok=True)
            _own(folder, uid, gid, 0o711)
    # The folders above each worker's are the run's uid's (made here by root otherwise): it may remove the run.
    parents = {run.outbox(1).parent, run.sessions(1).parent, *([run.worktrees_dir(1).parent] if info.writers else [])}
    for parent in parents:
        if not parent.exists() or parent.stat().st_uid == 0:
            parent.mkdir(exist_ok=True)
            _own(parent, uid, gid, 0o755)
    for n in range(1, info.workers + 1):
        w = worker_uid(n)
        _own_tree(run.outbox(n), w, gid, 0o2775)
        if run.state(n).is_symlink():
            run.state(n).unlink()
        run.state(n).touch()
        _own(run.state(n), w, w, 0o644)
        _own_tree(run.sessions(n), w, w, 0o700)
        _own_tree(run.config_dir(n), w, gid, 0o710)
        if info.writers:
            # Its writer jobs' worktrees, each checked out as worker N's own (RunRepo.checkout owner=), each job's
            # folder and the one holding them the run's uid's (a resumed run's earlier worktrees too).
            worktrees = run.worktrees_dir(n)
            _own_tree(worktrees, w, w, 0o2750)
            for job in worktrees.iterdir():
                if job.is_dir() and not job.is_symlink():
                    _own(job, uid, w, 0o770)
            _own(worktrees, uid, w, 0o2750)
    panes = pane_sockets_dir(run.root)
    for folder in (panes.parent, panes):
        _own(_folder(folder), uid, gid, 0o711)
    for n in range(1, info.workers + 1):
        _own(_folder(panes / f"pane-{n}"), uid, worker_uid(n), 0o710)


def _folder(path: Path) -> Path:
    """`path`, a folder (whatever was planted there before the init ran is no longer)."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    path.mkdir(exist_ok=True)
    return path


def foreign_folders(root: Path, me: int) -> list[tuple[int, Path]]:
    """The top-most folders under `root` another uid owns (`model/`: the gateway's; a worker's outbox, session
    store, worktrees), with their owner; links are never followed."""
    found = []
    for top, dirs, _files in os.walk(root, followlinks=False):
        for name in list(dirs):
            st = os.lstat(os.path.join(top, name))
            if stat.S_ISDIR(st.st_mode) and st.st_uid != me:
                found.append((st.st_uid, Path(top) / name))
                dirs.remove(name)  # emptied as its owner, below
    return found


def remove_as_owners(root: Path) -> None:
    """`root` (a run folder of this uid's) gone, though other uids own folders in it: each such folder is
    emptied as its owner (`find -delete`: links removed, never followed), then the rest removed as this uid.
    Needs CAP_SETUID and CAP_SETGID (a container's strict run keeps them to start each pane as its worker);
    without them, what another uid owns stays (OSError)."""
    me = os.geteuid()
    for uid, folder in foreign_folders(root, me):
        if uid == 0:
            continue  # never as root: what root made stays (the rmtree below says so)
        subprocess.run([*drop_argv(uid, uid), "find", str(folder), "-mindepth", "1", "-delete"], check=False)
        folder.rmdir()  # empty now, in a folder of this uid's (which it may not even list: 0700)
    shutil.rmtree(root)


def stop_as(uid: int, group: int) -> None:
    """Send SIGTERM to process group `group` as `uid` (the init's gateway, under its keeper: the run's uid may
    not signal it, but a strict run's may start a process as its uid)."""
    kill = "import os, signal, sys; os.killpg(int(sys.argv[1]), signal.SIGTERM)"
    subprocess.run([*drop_argv(uid, uid), sys.executable, "-c", kill, str(group)], check=False)

"""A swarm run's task, its first process: bring the run home to this node, then hand over to the container's
init as a container the host started would.

    python -m orch.backends.swarm.task NAME -- CMD [ARG...]     (root, with the init's capabilities)

1. no_new_privs, first (Swarm 20.10 services have no `no-new-privileges`);
2. finds its collector on the run's network (orch.backends.swarm.collector), and gives the empty volumes of
   the run folder and the workspace, and the tmpfs home, to the run's uid;
3. has the run's uid, with no capability, fetch the run folder and the workspace from the collector
   (`syncer restore`): a new run's folder as the user's side made it, or a resumed one as its last pass left
   it. The workspace loses every group and other write bit, so no worker's uid may change the tree;
4. execs orch.container.init with the collector's address (the firewall opens it to the run's uid alone)
   and CMD wrapped in the syncer, which pushes the run home while it runs and once it ends.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

from orch.backends.swarm.names import COLLECTOR_PORT, collector_name
from orch.container.layout import HOME, PYTHON, WORKDIR, run_mount
from orch.errors import OrchError, WaitTimeoutError
from orch.run.folder import validate_name
from orch.run.uids import drop_argv, no_new_privs
from orch.settings.compose import UID
from orch.settings.internal import GID, SWARM_COLLECTOR
from orch.waits import wait_until

FIND_TIMEOUT = 60.0
"""Seconds to find the collector's address on the run's network (Swarm's DNS learns a task a moment late)."""


class TaskError(Exception):
    """Why the task cannot start, in one line."""


def find_collector(name: str, timeout: float = FIND_TIMEOUT) -> str:
    """The collector's address on the run's network that answers: Swarm's DNS (127.0.0.11) may still give
    the address of the task a new life's collector replaced."""

    def answering() -> str | None:
        try:
            found = socket.getaddrinfo(collector_name(name), COLLECTOR_PORT, socket.AF_INET, socket.SOCK_STREAM)
        except OSError:
            return None
        for address in {str(entry[4][0]) for entry in found}:
            with contextlib.suppress(OSError), socket.create_connection((address, COLLECTOR_PORT), timeout=2.0):
                return address
        return None

    try:
        return wait_until(answering, timeout, f"the collector {collector_name(name)} on the run's network")
    except WaitTimeoutError as exc:
        raise TaskError(str(exc)) from None


def strip_group_writes(root: Path) -> None:
    """No group or other write bit left in the tree: only its owner, the run's uid, may change it."""
    for _top, dirs, files, fd in os.fwalk(root, follow_symlinks=False):
        for entry in [*dirs, *files]:
            st = os.stat(entry, dir_fd=fd, follow_symlinks=False)
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022:
                os.chmod(entry, stat.S_IMODE(st.st_mode) & ~0o022, dir_fd=fd)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m orch.backends.swarm.task NAME -- CMD [ARG...]", file=sys.stderr)
        return 2
    try:
        name = validate_name(argv[0])
        uid, gid = UID.get(), GID.get()
        if not uid or not gid:
            raise TaskError(f"{UID.name} and {GID.name} must name the run's uid and gid")
        target = f"{find_collector(name)}:{COLLECTOR_PORT}"
        for mount in (run_mount(name), WORKDIR, HOME):
            os.chown(mount, uid, gid)
        env = {**os.environ, SWARM_COLLECTOR.name: target}
        fetch = [*drop_argv(uid, gid), PYTHON, "-m", "orch.backends.swarm.syncer", "restore", name]
        if subprocess.run(fetch, env=env, check=False).returncode != 0:
            raise TaskError(f"the run could not be fetched from its collector at {target}")
        strip_group_writes(Path(WORKDIR))
    except (OrchError, TaskError, OSError) as exc:
        print(f"orch-task: {exc}", file=sys.stderr, flush=True)
        return 2
    command = [*argv[2:]]
    tini, rest = (command[:2], command[2:]) if command[1:2] == ["--"] else ([], command)
    sync = [PYTHON, "-m", "orch.backends.swarm.syncer", "run", name, "--", *rest]
    init = [PYTHON, "-m", "orch.container.init", "--", *tini, *sync]
    os.execve(init[0], init, env)


if __name__ == "__main__":
    no_new_privs()
    sys.exit(main(sys.argv[1:]))

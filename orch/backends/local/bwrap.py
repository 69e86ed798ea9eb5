"""Local strict isolation: each local worker's pane runs inside a bubblewrap sandbox of its own.

All local workers share the user's uid, so what keeps them apart is what each one can see:

- its own pid namespace: it sees only its own processes (never the gateway's or the controller's
  environment, nor another worker's);
- no network (`--unshare-net`): it reaches the model only through the gateway, by a socket bound into
  its sandbox alone (orch.backends.local.relay on the host, orch.backends.local.portal inside, listening on the
  gateway's own loopback address, so the worker's base URL is unchanged); with `--egress allowlist`,
  the listed names too, through the relay's CONNECT proxy on a socket beside it (orch.backends.local.egressproxy);
- a file system made of the system's read-only folders, Python and orch, the agents' installs, the
  workdir and the run folder read-only, and writable only `writable(run, n, cwd)`: its outbox, its hook log,
  its session store, its own config dir and its current job's worktree when it has one; /tmp, /dev/shm and /run
  are its own tmpfs, each the size of its disk cap (SANDBOX_TMPFS), and the rest of /dev read-only. The
  user's home (the agents' logins), $ORCH_HOME's gateway handles (the control key, the workers' tokens),
  the other workers' config dirs and session stores, the tmux server's socket are not there at all;
- the bus only through its own socket (SANDBOX_SOCKETS/OWN_BUS; the run's `bus.sock` in there is it
  too, over the controller's): the relay stamps every post with the worker whose socket it came in on, so
  no worker can post as another;
- for an agent whose helper reads and types into its pane (aider's watcher: `own_pane`), that one pane
  through the relay's pane socket, PANE_SOCKET: never the tmux server itself.

Its sockets come in its own folder of the relay's, bound read-only at SANDBOX_SOCKETS: a relay started
again after it died serves new sockets there, which the running sandbox sees at once.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path

import orch
from orch import prereqs, procs
from orch.gateway.process import handle_path
from orch.run.folder import RunFolder
from orch.run.paths import OWN_BUS, SANDBOX_SOCKETS, SANDBOX_TMPFS, agents_dir, launch_dir

SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/nix")
"""The system's read-only folders a sandbox sees (a symlink, as /bin is on merged-usr, stays one)."""
GATEWAY_SOCKET = str(SANDBOX_SOCKETS / "gateway.sock")
"""The worker's way to the gateway inside its sandbox (orch.backends.local.portal listens for it)."""
EGRESS_SOCKET = str(SANDBOX_SOCKETS / "egress.sock")
"""The worker's CONNECT proxy inside its sandbox, when its run allows egress (orch.backends.local.egressproxy)."""
PANE_SOCKET = SANDBOX_SOCKETS / "pane.sock"
"""The relay's socket for the worker's own pane inside its sandbox (aider's watcher)."""
HOOKS_SOCKET = str(SANDBOX_SOCKETS / "hooks.sock")
"""The worker's hooks over HTTP inside its sandbox, for an agent with `http_hooks` (orch.backends.local.httphooks)."""
HOOK_PORT = 9127
"""Where its portal listens for those hooks on the sandbox's own loopback (its network is its own: any port)."""
HOOK_URL = f"http://127.0.0.1:{HOOK_PORT}/hook/"
"""Its hooks post here with the event's name appended (WorkerContext.hook_url; httphooks reads the name)."""


class Bwrap:
    """The one bubblewrap command line orch writes: a worker's sandbox (`argv`) and a change's checks' sandbox
    (orch.lead.changes.gate) are each a series of these steps, which bwrap applies in order. Every sandbox gets
    namespaces of its own (pid, network, ipc, uts, cgroup; a user namespace unless root: orch.prereqs) and dies
    with its parent."""

    def __init__(self, binary: Path | str) -> None:
        self.args: list[str] = [str(binary), *prereqs.bwrap_namespaces(), "--die-with-parent"]

    def add(self, *args: str) -> Bwrap:
        self.args += args
        return self

    def ro(self, source: Path | str, dest: Path | str | None = None) -> Bwrap:
        """`source` read-only at `dest` (default: the same path)."""
        return self.add("--ro-bind", str(source), str(source if dest is None else dest))

    def bind(self, source: Path | str, dest: Path | str | None = None) -> Bwrap:
        """`source` writable at `dest` (default: the same path)."""
        return self.add("--bind", str(source), str(source if dest is None else dest))

    def tmpfs(self, path: Path | str, size: int | None = None, perms: str | None = None) -> Bwrap:
        """An empty tmpfs at `path`, of at most `size` bytes (None: no size), with `perms` (octal)."""
        sized = ["--size", str(size)] if size is not None else []
        return self.add(*sized, *(["--perms", perms] if perms else []), "--tmpfs", str(path))

    def remount_ro(self, path: Path | str) -> Bwrap:
        return self.add("--remount-ro", str(path))

    def dir(self, path: Path | str, perms: str | None = None) -> Bwrap:
        return self.add(*(["--perms", perms] if perms else []), "--dir", str(path))

    def setenv(self, env: dict[str, str]) -> Bwrap:
        for key, value in env.items():
            self.add("--setenv", key, value)
        return self


def writable(run: RunFolder, n: int, cwd: Path | None = None) -> list[Path]:
    """Everything worker n may write, the one list: its outbox, its hook log, its agent's session store,
    its own config dir, and the worktree of its current job when it starts in one (`cwd` inside
    `worktrees_dir(n)`): that job's folder only, never the folder beside it where its next job's goes."""
    paths = [run.outbox(n), run.state(n), run.sessions(n), run.config_dir(n)]
    folder = run.worktrees_dir(n)
    if cwd is None or folder not in cwd.parents:
        return paths
    worktree = folder / cwd.relative_to(folder).parts[0]  # made by the controller before it restarts it there
    return [*paths, *([worktree] if worktree.is_dir() and not worktree.is_symlink() else [])]


def _system() -> list[str]:
    args = []
    for top in SYSTEM:
        path = Path(top)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), top]
        elif path.is_dir():
            args += ["--ro-bind", top, top]
    return args


def _covered(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def _install_root(binary: Path) -> list[Path]:
    """The folders an agent's executable needs: its own, and its package's install (the folder holding
    its node_modules, or a venv's root) when it is a link into one."""
    real = binary.resolve()
    parts = real.parts
    root = Path(*parts[: parts.index("node_modules")]) if "node_modules" in parts else real.parent.parent
    return [binary.parent, root]


def readable(binaries: Iterable[Path]) -> list[Path]:
    """What a sandbox sees read-only beyond the system's folders: Python and orch (the workers' hooks and
    `orch bus post`), and the agents' installs."""
    found = [Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parent.parent]
    found.append(Path(orch.__file__).resolve().parent)
    for path in binaries:
        found += _install_root(path)
    system = [Path(top) for top in SYSTEM]
    unique: list[Path] = []
    for path in found:
        if path.exists() and not _covered(path, system) and not _covered(path, unique):
            unique = [p for p in unique if path not in p.parents] + [path]
    return unique


def private() -> list[Path]:
    """What no sandbox may see even below a folder it binds: the gateways' handles (the control key) and
    saved tokens, every worker's config dir (its token), the strict launch bundles."""
    return [handle_path("x").parent, agents_dir(), launch_dir()]


def argv(
    run: RunFolder,
    n: int,
    workdir: Path,
    cwd: Path,
    binaries: Iterable[Path],
    sockets: Path,
    home: Path | None,
    space: int | None = None,
) -> list[str]:
    """The bwrap command line (up to `--`) that puts worker n's pane in its sandbox. Binds are applied in
    order: the run folder read-only first, then tmpfs over the others' session stores, then the worker's
    own writable paths over those. `workdir`: the tree under audit (read-only); `cwd`: where the agent starts
    (a writer's worktree, writable, or the workdir). `home`: a HOME of its own (the user's is not there).
    `sockets`: its folder of the relay's sockets (orch.backends.local.relay.worker_sockets), bound at
    SANDBOX_SOCKETS. `space`: the size of each of its own tmpfs (SANDBOX_TMPFS: its disk cap; None: no size)."""
    box = Bwrap(prereqs.bwrap_binary()).add("--cap-drop", "ALL", *_system(), "--proc", "/proc", "--dev", "/dev")
    for place in SANDBOX_TMPFS:  # memory: each the size of its disk cap (the kernel's bound), measured as what it wrote
        box.tmpfs(place, space)
    box.remount_ro("/dev")  # the rest of bwrap's /dev: a tmpfs of no size, else
    if Path("/sys").is_dir():
        box.ro("/sys")  # what runtimes read for CPU and memory limits
    for path in readable(binaries):
        box.ro(path)
    box.ro(workdir).ro(run.root).tmpfs(run.sessions_dir)  # the others' transcripts: not there
    for hidden in private():  # in case the workdir holds them ($ORCH_HOME inside it): not there either
        if hidden.is_dir():
            box.tmpfs(hidden)
    for path in writable(run, n, cwd):
        box.bind(path)
    box.ro(sockets, SANDBOX_SOCKETS)
    # The controller's bus.sock (stamped by uid: every local worker's is the user's) hidden under its own.
    box.bind(sockets / OWN_BUS, run.bus_socket)
    box.setenv({"HOME": str(home)} if home is not None else {})
    return [*box.setenv({"TMPDIR": "/tmp"}).add("--chdir", str(cwd)).args, "--"]


def prepare(run: RunFolder, n: int) -> None:
    """Make what worker n's sandbox binds before it starts: bwrap binds only what exists, and the run
    folder it binds over is read-only in there."""
    run.outbox(n).mkdir(parents=True, exist_ok=True)
    run.sessions(n).mkdir(parents=True, exist_ok=True, mode=0o700)
    run.config_dir(n).mkdir(parents=True, exist_ok=True, mode=0o700)
    run.state(n).touch()
    if not run.bus_socket.exists():
        run.bus_socket.touch()  # the mount point of each worker's own bus socket


class ByNamespace:
    """Attribution in bubblewrap sandboxes: a process is the worker's whose sandbox's pid namespace it runs in,
    which it can never leave; a namespace belongs to the worker whose bwrap (its parent outside, a process no
    worker can start or change) binds that worker's outbox. Each namespace is found once, kept while its bwrap
    lives."""

    def __init__(self, outboxes: dict[str, int]) -> None:
        self._outboxes = outboxes
        self._host = procs.pid_namespace(os.getpid())
        self._sandboxes: dict[int, tuple[int | None, int]] = {}
        """pid namespace: (its worker, or None for another's sandbox; the bwrap process outside that made it)."""
        found = prereqs.bwrap_path()
        self._bwrap = {"bwrap", *([found.name] if found is not None else [])}

    def forget(self, alive: set[int], span: range | tuple[range, range] | None) -> None:
        for ns, (_, outer) in list(self._sandboxes.items()):
            if outer not in alive or procs.in_span(outer, span):
                del self._sandboxes[ns]  # its bwrap is gone: the namespace's inode may be handed out again

    def owner(self, pid: int) -> int | None:
        """The worker whose sandbox pid runs in: its namespace's, found once per namespace by walking up to the
        first ancestor outside every worker's sandbox (a sandbox inside a sandbox, as Codex makes its own, is its
        worker's too)."""
        ns = procs.pid_namespace(pid)
        if ns is None or ns == self._host:
            return None
        if ns in self._sandboxes:
            return self._sandboxes[ns][0]
        chain = procs.ancestry(pid) or []
        for parent in chain[1:]:
            outer = procs.pid_namespace(parent)
            if outer in self._sandboxes:
                self._sandboxes[ns] = (self._sandboxes[outer][0], self._sandboxes[outer][1])
                return self._sandboxes[ns][0]
            if outer == self._host:
                n = self._bwrap_worker(parent)
                self._sandboxes[ns] = (n, parent)
                return n
        return None

    def _bwrap_worker(self, pid: int) -> int | None:
        """The worker whose sandbox this bwrap process (outside every sandbox) made: the one whose outbox it
        binds writable."""
        argv = procs.cmdline(pid)
        if not argv or os.path.basename(argv[0]) not in self._bwrap:
            return None
        for i, arg in enumerate(argv[:-2]):
            if arg == "--bind" and argv[i + 1] == argv[i + 2] and argv[i + 1] in self._outboxes:
                return self._outboxes[argv[i + 1]]
        return None

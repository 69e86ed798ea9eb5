"""Where orch keeps things on the machine it runs on (host or container)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from orch.settings.internal import AGENTS_DIR
from orch.settings.user import HOME


def orch_home() -> Path:
    """`$ORCH_HOME`, defaulting to `~/.orch`."""
    return HOME.get()


def agent_cache() -> Path:
    """Where `orch setup` installs the pinned agent CLIs, and where orch looks for them (every reader agrees:
    the agents' facts, action.yml's cache): `$XDG_CACHE_HOME/orch`, by default `~/.cache/orch`. A relative
    XDG_CACHE_HOME is ignored, as the XDG spec says."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "orch"


def runs_dir() -> Path:
    return orch_home() / "runs"


def agents_dir() -> Path:
    """Per-worker agent config dirs. Kept outside the run folder: they may hold copied credentials.

    `$ORCH_AGENTS_DIR` overrides it: a run's container points it at its tmpfs home, so config dirs
    (and any credentials copied into them) never reach a disk.
    """
    return AGENTS_DIR.get() or orch_home() / "agents"


def workspaces_dir() -> Path:
    """Disposable workspace copies of containerised runs started with `--copy` (removed on kill)."""
    return orch_home() / "workspaces"


def launch_dir() -> Path:
    """Where the controller leaves each strict-isolation worker's launch bundle for its pane to open
    (orch.fleet.become): beside the config dirs, readable by the controller's uid only."""
    return agents_dir().parent / "launch"


def sockets_dir(run_root: Path) -> Path:
    """A local strict run's per-worker sockets (orch.backends.local.relay): outside the run folder, which every
    worker sees, in a short path (a socket's path is at most 107 bytes): `$XDG_RUNTIME_DIR` or /tmp,
    a folder of this uid's, one per run folder."""
    base = Path(os.environ.get("XDG_RUNTIME_DIR") or "/tmp") / f"orch-{os.geteuid()}"
    return base / hashlib.sha256(str(run_root).encode()).hexdigest()[:12]


SANDBOX_SOCKETS = Path("/run/orch")
"""Inside a local strict worker's sandbox: its own folder of the relay's sockets (OWN_BUS, gateway.sock,
pane.sock), bound read-only (orch.backends.local.bwrap, orch.backends.local.relay)."""
OWN_BUS = "posts.sock"
"""A local strict worker's own bus socket in that folder: every post there is stamped as that worker."""
SANDBOX_TMPFS = ("/tmp", "/dev/shm", "/run")
"""Inside a local strict worker's sandbox: its own tmpfs, each the size of its disk cap; what it writes there is
memory, and counts as bytes it wrote (orch.backends.local.bwrap, orch.fleet.diskuse)."""


def pane_sockets_dir(run_root: Path) -> Path:
    """In a run's container under strict isolation: the folder of each worker's own pane socket
    (orch.backends.local.relay.own_pane_socket), which the container's init makes before any worker starts
    (orch.container.owners.isolate_workers): `pane-N/` is the run's uid's with group worker N's, 0710."""
    return Path("/tmp/orch-panes") / hashlib.sha256(str(run_root).encode()).hexdigest()[:12]

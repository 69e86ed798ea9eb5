"""Where orch keeps things on the machine it runs on (host or container)."""

from __future__ import annotations

import os
from pathlib import Path


def orch_home() -> Path:
    """`$ORCH_HOME`, defaulting to `~/.orch`."""
    return Path(os.environ.get("ORCH_HOME") or Path.home() / ".orch")


def runs_dir() -> Path:
    return orch_home() / "runs"


def agents_dir() -> Path:
    """Per-worker agent config dirs. Kept outside the run folder: they may hold copied credentials.

    `$ORCH_AGENTS_DIR` overrides it: a run's container points it at its tmpfs home, so config dirs
    (and any credentials copied into them) never reach a disk.
    """
    explicit = os.environ.get("ORCH_AGENTS_DIR")
    return Path(explicit) if explicit else orch_home() / "agents"


def workspaces_dir() -> Path:
    """Disposable workspace copies of containerised runs started with `--copy` (removed on kill)."""
    return orch_home() / "workspaces"

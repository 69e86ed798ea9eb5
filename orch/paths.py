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
    """Per-worker agent config dirs. Kept outside the run folder: they may hold copied credentials."""
    return orch_home() / "agents"

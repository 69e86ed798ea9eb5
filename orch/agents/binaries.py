"""Finding an agent CLI's executable and asking it its version: the same for every adapter."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from orch.contracts import VERSION_TIMEOUT
from orch.errors import UsageError
from orch.settings.base import Setting


def find_binary(setting: Setting[str | None] | None, command: str, pinned: Path, what: str, install: str) -> Path:
    """The agent's executable: `setting` when set, else `command` on PATH, else the pinned copy
    scripts/setup.sh installs; UsageError naming `install` when there is none."""
    chosen = setting.get() if setting else None
    found = chosen or shutil.which(command) or (str(pinned) if pinned.exists() else None)
    if not found or not Path(found).exists():
        also = f" (or set {setting.name})" if setting else ""
        raise UsageError(f"{what} is not installed", hint=f"{install}{also}")
    return Path(found)


def version_of(
    binary: Path | Callable[[], Path],
    env: Mapping[str, str] | None = None,
    last: bool = False,
    timeout: float = VERSION_TIMEOUT,
) -> str | None:
    """What `BINARY --version` prints: its first word (`last`: its last), None when it cannot tell (an
    adapter passes its `binary` method: not installed is None too)."""
    try:
        if callable(binary):
            binary = binary()
        out = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=timeout, check=False, env=env
        )
    except (OSError, subprocess.TimeoutExpired, UsageError):
        return None
    words = out.stdout.split()
    if out.returncode != 0 or not words:
        return None
    return words[-1] if last else words[0]

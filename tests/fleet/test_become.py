"""orch.fleet.become, and every orch module a pane runs in a worker's folder: run from orch's install, never from
that folder (a writer's worktree, a reviewer's checkout of another worker's change), whatever is planted there."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from orch.agents.scripted.adapter import TUI_ARGV
from orch.fleet.become import MODULE_ARGV


@pytest.mark.parametrize(("argv", "said"), [([*MODULE_ARGV, "3"], "worker cannot start"), (list(TUI_ARGV), "ORCH_")])
def test_an_orch_planted_in_the_workers_folder_is_never_imported(tmp_path: Path, argv: list[str], said: str) -> None:
    """A hostile writer's change adds `orch/` (its own `orch/fleet/become.py`): a reviewer moved into its checkout
    would have run it as itself, its launch bundle open, had Python put the cwd first on the module path."""
    canary = tmp_path / "canary"
    for package in ("orch", "orch/fleet", "orch/agents", "orch/agents/scripted"):
        (tmp_path / "checkout" / package).mkdir(parents=True)
        (tmp_path / "checkout" / package / "__init__.py").write_text(f"open({str(canary)!r}, 'w').close()\n")
    env = {k: v for k, v in os.environ.items() if k != "ORCH_STATE_FILE"}
    done = subprocess.run(argv, cwd=tmp_path / "checkout", env=env, capture_output=True, text=True, timeout=60)
    assert not canary.exists()
    assert done.returncode != 0 and said in done.stdout + done.stderr  # orch's own module ran (and stopped: no bundle)

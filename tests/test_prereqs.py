"""orch.prereqs: what this machine lacks, each with its fix, found with the standard library alone, before
anything is downloaded (scripts/setup.sh runs it from the tree with `python3 -S`, no venv yet)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orch import prereqs

REPO = Path(__file__).resolve().parents[1]


def test_this_machine_has_what_a_local_run_needs() -> None:
    assert prereqs.missing(with_docker=False) == []  # CI installs them all (.ci/run)
    assert "bwrap" in prereqs.bwrap_works() and prereqs.tmux_version()


def test_each_missing_piece_is_a_line_with_its_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_BWRAP", str(tmp_path / "no-bwrap"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/docker.sock")
    found = {item.what.split()[0]: item for item in prereqs.missing(with_docker=True)}
    assert {"tmux", "strict", "git", "npm", "no"} <= found.keys(), found
    assert "apt-get install bubblewrap" in found["strict"].fix
    assert "docker" in found["no"].line()
    assert prereqs.missing(local=False, npm=False) == []  # an image-only setup needs neither


def test_it_runs_from_the_tree_with_the_standard_library_alone(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    ok = subprocess.run([sys.executable, "-S", "-m", "orch.prereqs"], env=env, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    env["ORCH_BWRAP"] = str(tmp_path / "no-bwrap")
    lacking = subprocess.run([sys.executable, "-S", "-m", "orch.prereqs"], env=env, capture_output=True, text=True)
    assert lacking.returncode == 2
    assert lacking.stderr.startswith("orch: missing: strict isolation on this machine needs bubblewrap")

"""A fleet of three scripted workers on a private tmux server, shared by the fleet layer's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from orch.run.folder import RunFolder
from tests.helpers import orch


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def run3(workdir: Path) -> RunFolder:
    result = orch("up", "r3", "-n", "3", "--agent", "scripted", "--workdir", workdir, "--local")
    assert result.exit_code == 0, result.output
    return RunFolder.for_name("r3")

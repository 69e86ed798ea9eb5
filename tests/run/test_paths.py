"""orch's own directories under ORCH_HOME."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orch.run.paths import agents_dir

pytestmark = pytest.mark.pure  # starts nothing: no process, no engine, no connection


def test_agents_dir_honours_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ORCH_AGENTS_DIR", str(tmp_path / "agents"))
    assert agents_dir() == tmp_path / "agents"
    monkeypatch.delenv("ORCH_AGENTS_DIR")
    assert agents_dir() == Path(os.environ["ORCH_HOME"]) / "agents"

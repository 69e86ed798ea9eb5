"""Fixtures the lead's tests share."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def spec_dir(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    return tmp_path

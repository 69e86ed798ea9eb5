"""A run folder of WRITERS workers, made without starting anything (the bus's and its server's tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orch.run.folder import RunFolder
from tests.helpers import run_info

WRITERS = 16


@pytest.fixture
def run(tmp_path: Path) -> RunFolder:
    folder = RunFolder.for_name("busrun")
    folder.create(run_info("busrun", workers=WRITERS, workdir=str(tmp_path)))
    return folder

"""run.json of a backend whose package this process has not loaded (a swarm run's, read by a process that
never imported the backends' registry) reads as that backend's record all the same."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from orch.backends.swarm.record import SwarmInfo, SwarmRunInfo
from orch.run.folder import RunFolder
from tests.helpers import run_info

READ = (
    "import sys; from orch.run.folder import RunFolder; info = RunFolder.for_name('far').info(); "
    "assert 'orch.backends.swarm.record' in sys.modules; print(type(info).__name__, info.where)"
)


def test_a_swarm_run_json_reads_where_no_backend_was_loaded(tmp_path: Path) -> None:
    info = SwarmRunInfo.of(run_info("far"), swarm=SwarmInfo(image="orch:1"))
    RunFolder.for_name("far").create(info)
    done = subprocess.run([sys.executable, "-c", READ], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "SwarmRunInfo swarm"

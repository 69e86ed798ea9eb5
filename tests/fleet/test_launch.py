"""orch.fleet.launch's process reading: a process that is gone while it is read is no process (the lead
looks for a worker's stray processes after every job; one exiting meanwhile must not crash the controller)."""

from __future__ import annotations

import os
import subprocess

from orch.fleet.launch import _ancestry


def test_the_ancestry_of_a_process_that_is_gone_is_none() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()  # reaped: /proc has nothing for it, an empty read
    assert _ancestry(gone.pid) is None
    mine = _ancestry(os.getpid())
    assert mine is not None and mine[0] == os.getpid() and mine[-1] in (0, 1)

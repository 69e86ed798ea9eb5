"""A process started by a run's tmux server (how a strict container run's controller starts the checks' uid
and a worker's checkout): a real private tmux server; its output's tail and exit code come back."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from orch.lead.changes.switch import via_tmux


@pytest.fixture
def server() -> Iterator[str]:
    name = "orch-switch-test"
    subprocess.run(["tmux", "-L", name, "-f", "/dev/null", "new-session", "-d", "-s", "s"], check=True)
    try:
        yield name
    finally:
        subprocess.run(["tmux", "-L", name, "kill-server"], check=False, capture_output=True)


def test_output_tail_and_exit_code_come_back(server: str) -> None:
    ran = via_tmux(server, ["sh", "-c", "echo 'it ran'; yes x | head -c 5000; echo; echo end; exit 3"], 30, 100)
    assert ran.code == 3 and ran.output.endswith(b"end\n") and len(ran.output) <= 100


def test_a_process_that_outlives_the_wait_has_no_exit_code(server: str) -> None:
    ran = via_tmux(server, ["sh", "-c", "sleep 5"], 0.5)
    assert ran.code is None

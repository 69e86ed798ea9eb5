"""orch/lead/reproduce.py: a finding's reproduce command run by orch in the checks' real sandbox, on a copy of the
tree: its exit code and output recorded, the tree under audit untouched, a hung command stopped at its time limit,
nothing it starts left running (the flow around it, verifiers waiting for it and citing it: tests/scenarios/
test_scripted.py)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from orch.lead.changes import gate
from orch.lead.changes.checkwatch import CheckLimits
from orch.lead.changes.stopper import Stopper
from orch.lead.reproduce import reproduce
from tests.helpers import own_processes

LIMITS = CheckLimits(timeout=60)
pytestmark = pytest.mark.skipif(gate.sandbox_available() is not None, reason="no checks' sandbox on this machine")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    root.mkdir()
    (root / "pages.py").write_text("start = page * size\n")
    return root


def test_its_exit_code_and_output_are_recorded_and_the_tree_stays_as_it_was(tree: Path) -> None:
    command = "grep -c 'page \\* size' pages.py; echo planted > pages.py; rm -f pages.py.bak; exit 3"
    run = reproduce(tree, command, LIMITS, gate.NO_RUN, Stopper())
    said = (run.command, run.exit_code, run.timed_out, run.error, run.output)
    assert said == (command, 3, False, None, "1\n"), run.output  # the whole output, should it fail
    assert (tree / "pages.py").read_text() == "start = page * size\n"  # it wrote its own copy


def test_it_reaches_no_network_and_no_run_folder(tree: Path, orch_home: Path) -> None:
    (orch_home / "runs").mkdir(parents=True)
    (orch_home / "runs" / "secret").write_text("token\n")
    command = f"cat {orch_home}/runs/secret; python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), 2)'"
    run = reproduce(tree, command, LIMITS, gate.NO_RUN, Stopper())
    assert run.exit_code != 0 and "token" not in run.output


def test_a_hung_command_is_stopped_and_leaves_nothing_running(tree: Path) -> None:
    seconds = str(600 + time.monotonic_ns() % 100_000)  # a sleep of its own, to look for
    run = reproduce(
        tree, f"sleep {seconds} & echo started; sleep 600", replace(LIMITS, timeout=1), gate.NO_RUN, Stopper()
    )
    assert run.timed_out and run.exit_code is None and run.output == "started\n"
    # Gone before its result came back (the sandbox's pid namespace emptied), not on its way out.
    assert own_processes(["sleep", seconds]) == []


def test_a_tree_it_cannot_copy_is_said(tmp_path: Path) -> None:
    run = reproduce(tmp_path / "gone", "true", LIMITS, gate.NO_RUN, Stopper())
    assert run.exit_code is None and run.error is not None and "could not be copied" in run.error

"""The largest fleet a run may have (orch.run.folder.MAX_WORKERS: 64) on one machine, end to end: `orch run` in
process with orch's scripted agent in real tmux panes, each worker in its own sandbox (local strict isolation),
its relay, gateway and scripted model. It boots, takes every brief, verifies its findings and stops cleanly:
no brief lost or sent twice, no bus line lost or out of its sender's order, nothing left running. (Real Claude
Code at 64 is a benchmark, not a test: `python -m bench --only roles`, bench/README.md; the limits a large
fleet meets are docs/scale.md's.)"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from orch.backends.local import relay
from orch.backends.registry import confinement_of
from orch.fleet import launch
from orch.gateway.process import handle_path
from orch.jobs.state import load_state
from orch.run import bus
from orch.run.folder import MAX_WORKERS, RunFolder
from tests.helpers import SAMPLE, orch
from tests.lead.leadrun import (
    DONE,
    PAGES_FINDING,
    RESULT,
    assert_each_brief_sent_once,
    assert_never_self_verified,
    findings_step,
    reply,
    statuses,
    write_spec,
)

FINDERS_EVERY = 8
"""Every eighth worker reports a finding: 8 verification jobs, each to a worker other than its finder."""
POSTS = 3


def _script(name: str, n: int) -> list[dict[str, str]]:
    posts = [{"bash": f"orch bus post {name} --as {n} 'worker {n} post {k}'"} for k in range(1, POSTS + 1)]
    found = findings_step(PAGES_FINDING) if n % FINDERS_EVERY == 1 else findings_step()
    return [*posts, found, RESULT, DONE, reply()]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    shutil.copytree(SAMPLE, path)
    return path


def test_sixty_four_workers_boot_take_every_brief_verify_and_stop(workdir: Path, tmp_path: Path) -> None:
    name, n_workers = "big", MAX_WORKERS
    tasks = [
        {"id": f"t{n}", "goal": f"Look into part {n}.", "worker": n, "offline_script": _script(name, n)}
        for n in range(1, n_workers + 1)
    ]
    spec = write_spec(
        tmp_path / "big.yaml",
        workdir,
        tasks,
        agent="scripted",
        workers=n_workers,
        dispatch="per-worker",
        timeouts={"boot": 600, "job": 600, "run": 900},  # a loaded CI machine's 64 boots: minutes, not hours
        limits={"nudge_after": 120},
    )
    result = orch("run", spec, "--local", "--name", name)
    assert result.exit_code == 0, result.output
    run = RunFolder.for_name(name)
    state = load_state(run)
    assert_each_brief_sent_once(run, state)  # every task and every verification, each once
    assert_never_self_verified(state)
    found = statuses(run)
    assert len(found) == n_workers // FINDERS_EVERY and set(found.values()) == {"CONFIRMED"}
    # The bus: every post there, once, in its sender's order (posts go through each sandbox's own socket).
    posted: dict[str, list[str]] = {}
    for raw in bus.read_lines(run):
        line = bus.parse_line(raw)
        assert line is not None, raw
        posted.setdefault(line.sender, []).append(line.text)
    assert posted == {f"W{n}": [f"worker {n} post {k}" for k in range(1, POSTS + 1)] for n in range(1, n_workers + 1)}
    # Stopped cleanly: no worker process, no relay, no gateway, no tmux server.
    assert launch.worker_processes(run, n_workers, confinement_of(run.info())) == []
    assert not relay.running(run)
    assert not handle_path(name).exists()
    assert not launch.server_for(run.info()).alive()
    # The plain view of all 64 (what `orch watch --once` prints): a line per worker.
    view = orch("watch", name, "--once")
    assert view.exit_code == 0, view.output
    assert {int(m) for m in re.findall(r"^\s*W?(\d+)\b", view.output, re.MULTILINE)} >= set(range(1, n_workers + 1))

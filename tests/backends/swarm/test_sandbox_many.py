"""Many swarm runs at once, from one command: `orch run SPEC --repo ... --backend swarm` starts eight lead runs of
one spec over eight repositories, which Swarm spreads over the two workers, at most the per-node cap on each;
each says where it started and how it ended, `orch ls` shows each one's node and outcome, and nothing of any is
left on any node after it."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from orch.cli.outputs import LsOutput
from orch.report.summary import RunsSummary
from tests.dockertest import unique
from tests.helpers import orch
from tests.swarmtest import Cluster

pytestmark = [pytest.mark.swarm, pytest.mark.timeout(900)]

RUNS = 8
SPEC = """\
workdir: .
offline: true
agent: scripted
workers: 2
verification: {verifiers_per_finding: 1}
timeouts: {boot: 120, job: 120, run: 300}
tasks:
  - id: look
    role: finder
    goal: Look around.
    offline_script:
      - {write: "{{findings_file}}", content: '{"job": "{{job}}", "findings": []}'}
      - {bash: "ls > {{result_file}}"}
      - {bash: "touch {{done_file}}"}
      - {reply: "Finished."}
"""


def test_eight_runs_from_one_command_spread_over_two_nodes_and_leave_nothing(
    manager: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCH_IMAGE", manager.image)
    spec = tmp_path / "audit.yaml"
    spec.write_text(SPEC)
    prefix = unique("swm")
    repos = []
    for n in range(RUNS):  # one spec over eight repositories
        repo = tmp_path / f"r{n}"
        repo.mkdir()
        (repo / f"r{n}.txt").write_text(f"repository {n}\n")
        repos += ["--repo", str(repo)]
    names = [f"{prefix}-r{n}" for n in range(RUNS)]
    args = ["--backend", "swarm", "--constraint", "node.role==worker", "--per-node", "4", "--name", prefix]
    try:
        result = orch("run", spec, *repos, *args, "--json")
        assert result.exit_code == 0, result.output
        summary = RunsSummary.model_validate_json(result.stdout.strip().splitlines()[-1])
        assert [(run.run, run.status) for run in summary.runs] == [(name, "passed") for name in names]
        nodes = collections.Counter(run.where for run in summary.runs)
        assert nodes == {"swarm node orch-sw-w1": 4, "swarm node orch-sw-w2": 4}
        said = result.stderr.splitlines()
        assert said[0] == f"{RUNS} runs on the swarm backend, side by side, each placed by Swarm: {', '.join(names)}"
        started = [line for line in said if ": started (swarm node orch-sw-w" in line]
        assert sorted(line.split(":")[0] for line in started) == sorted(f"run {name}" for name in names)

        listed = LsOutput.model_validate(json.loads(orch("ls", "--json").stdout))
        rows = {row.name: row for row in listed.runs}
        for run in summary.runs:  # each one's node and how it ended, after its teardown
            row = rows[run.run]
            assert row.outcome is not None and (row.outcome.status, row.outcome.exit_code) == ("passed", 0)
            assert row.container == f"exit 0 on {(run.where or '').removeprefix('swarm node ')}"
    finally:
        for name in names:
            orch("kill", name)
    assert [thing for name in names for thing in manager.leftovers(name)] == []

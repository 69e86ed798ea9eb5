"""Loading a fleet spec (orch/spec/load.py): every error with its YAML location, a role's template file
read into the spec, `orch spec check` and `orch spec init`."""

from __future__ import annotations

from pathlib import Path

import pytest

from orch.spec.load import parse_spec
from orch.spec.model import Role
from tests.helpers import orch
from tests.lead.specs import GOOD, issues

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            GOOD + "  - goal: x\n    rol: finder\n",
            "tasks[1].rol: unknown key (not allowed here); did you mean 'role'? (line 6)",
        ),
        (GOOD + "  - goal: x\n    role: auditor\n", "tasks[1].role: input should be 'finder'"),
        (GOOD + "  - goal: x\n    role: verifier\n", "tasks[1].role: verification jobs are made from findings"),
        (GOOD + "  - role: finder\n", "tasks[1].goal: field required (line 5)"),
        (GOOD + "  - goal: x\n    worker: 9\n", "tasks[1].worker: worker 9 does not exist (the fleet has 3) (line 6)"),
        (GOOD + "  - id: Bad Id\n    goal: x\n", "tasks[1].id: string should match pattern"),
        (GOOD + "  - goal: x\n    id: t1\n", "tasks[1].id: duplicate task id 't1' (line 6)"),
        (
            GOOD + "  - goal: x\n    role: writer\n    change: always\n",
            "tasks[1].change: input should be 'required' or 'optional' (line 7)",
        ),
        (
            GOOD + "  - goal: x\n    change: required\n",
            "tasks[1].change: change: is for writer, fixer and scribe tasks",
        ),
        (GOOD.replace("workers: 3", "workers: 1"), "verification.verifiers_per_finding: 1 verifier(s) per finding"),
        (GOOD + "verification:\n  quorum: 3\n", "verification.quorum: quorum 3 is more than verifiers_per_finding"),
        (GOOD + "verification:\n  rounds: three\n", "verification.rounds: input should be 'find-verify'"),
        (GOOD + "timeouts:\n  job: -1\n", "timeouts.job: input should be greater than 0 (line 6)"),
        (
            GOOD + "limits:\n  nudge_afte: 3\n",
            "limits.nudge_afte: unknown key (not allowed here); did you mean 'nudge_after'? (line 6)",
        ),
        (GOOD + "roles:\n  finder:\n    template: 'hi {{nope}}'\n", "roles.finder.template: unknown placeholder"),
        (GOOD + "roles:\n  boss: {}\n", "roles.boss: input should be 'finder'"),
        (GOOD + "agents:\n  - workers: 2\n", "agents: give either agents: [...] or agent/model/workers, not both"),
        (
            GOOD.replace("workers: 3\n", "") + "agents:\n  - {workers: 2}\n  - {agent: nope}\n",
            "agents[1].agent: unknown agent 'nope' (available:",
        ),
        (
            GOOD + "  - goal: x\n    offline_script:\n      - {shout: hi}\n",
            "tasks[1].offline_script[0]: a step has exactly one of bash, write, read, tool, reply, fail",
        ),
        (
            GOOD + "  - goal: x\n    offline_script:\n      - {tool: WebFetch, input: 'http://x'}\n",
            "tasks[1].offline_script[0].input: must be a mapping (the tool's input)",
        ),
        (
            GOOD + "  - goal: x\n    offline_script:\n      - {tool: WebFetch, input: {url: '{{nope}}'}}\n",
            "tasks[1].offline_script[0].input: unknown placeholder {{nope}}",
        ),
        (
            GOOD + "  - goal: x\n    offline_script:\n      - {bash: ls, input: {}}\n",
            "tasks[1].offline_script[0]: a step has exactly one of",
        ),
        (
            GOOD + "  - goal: x\n    offline_script:\n      - {bash: 'echo {{verdict_file}}'}\n",
            "tasks[1].offline_script[0].bash: unknown placeholder {{verdict_file}}",
        ),
        (GOOD.replace("workdir: .", "workdir: nowhere"), "workdir: folder does not exist"),
        ("tasks: [\n", "spec: not valid YAML"),
        ("- just a list\n", "spec: a fleet spec is a YAML mapping"),
        ("workdir: .\ntasks: []\n", "tasks: list should have at least 1 item"),
        (
            GOOD + "placement:\n  constraints: [node.role==worker, zone=eu]\n",
            "placement.constraints[1]: 'zone=eu': expected KEY==VALUE or KEY!=VALUE (node.labels.zone==eu) (line 6)",
        ),
        (GOOD + "placement:\n  per_node: 0\n", "placement.per_node: input should be greater than or equal to 1"),
        (GOOD + "placement:\n  node: w1\n", "placement.node: unknown key (not allowed here)"),
    ],
    ids=[
        "unknown-task-key",
        "unknown-role",
        "verifier-task",
        "missing-goal",
        "worker-out-of-range",
        "bad-id",
        "duplicate-id",
        "bad-change",
        "change-on-a-finder",
        "too-few-workers",
        "quorum",
        "rounds",
        "negative-timeout",
        "unknown-limit",
        "template-placeholder",
        "unknown-role-override",
        "agents-and-workers",
        "unknown-agent",
        "script-step",
        "tool-input-not-a-mapping",
        "tool-input-placeholder",
        "input-without-tool",
        "script-placeholder",
        "workdir",
        "yaml",
        "not-a-mapping",
        "no-tasks",
        "placement-constraint",
        "placement-per-node",
        "placement-key",
    ],
)
def test_spec_errors_have_their_location(spec_dir: Path, text: str, expected: str) -> None:
    found = issues(text, spec_dir)
    assert any(i.startswith(expected) for i in found), found


def test_template_file_is_read_into_the_spec(spec_dir: Path) -> None:
    (spec_dir / "finder.md").write_text("Look at {{files}} for {{goal}}; write {{findings_file}}.")
    spec = parse_spec(GOOD + "roles:\n  finder:\n    template_file: finder.md\n", "f.yaml", spec_dir)
    assert spec.template(Role.FINDER).startswith("Look at {{files}}")
    assert spec.roles[Role.FINDER].template_file is None


def test_spec_check_lists_every_problem_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(GOOD + "  - goal: x\n    rol: finder\n" + "timeouts:\n  job: 0\n")
    result = orch("spec", "check", path)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert any("tasks[1].rol: unknown key" in ln and "did you mean 'role'?" in ln and "(line 6)" in ln for ln in lines)
    assert any("timeouts.job:" in ln and "(line 8)" in ln for ln in lines), lines

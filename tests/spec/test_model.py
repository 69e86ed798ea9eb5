"""The fleet spec (orch/spec/model.py): its defaults, the worker count it needs, per-worker agents and models.
Loading it with located errors: test_load.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from orch.spec.load import parse_spec
from orch.spec.model import PermissionPolicy, Role
from tests.lead.specs import GOOD, issues

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network


def test_good_spec_defaults(spec_dir: Path) -> None:
    spec = parse_spec(GOOD, "fleet.yaml", spec_dir)
    assert spec.workdir == spec_dir.resolve()
    assert spec.task_ids() == ["t1"] and spec.tasks[0].role is Role.FINDER
    assert spec.agent_models() == {1: ("claude", None), 2: ("claude", None), 3: ("claude", None)}
    assert spec.verification.needed() == 1
    assert spec.permissions is PermissionPolicy.DENY  # unattended: never stall on a prompt, never allow blindly


def test_worker_count_defaults_to_enough_for_verification(spec_dir: Path) -> None:
    spec = parse_spec("workdir: .\ntasks:\n  - goal: a\n", "f.yaml", spec_dir)
    assert spec.worker_count() == 2  # one finder and one verifier who is not the finder


def test_a_spec_with_writers_has_enough_workers_to_review_a_change(spec_dir: Path) -> None:
    """A writer never reviews its own change: too few workers would reject every change."""
    writer = "workdir: .\ntasks:\n  - {goal: a, role: scribe}\n"
    assert parse_spec(writer, "f.yaml", spec_dir).worker_count() == 2  # the scribe and its reviewer
    two = writer + "changes: {reviewers_per_change: 2}\n"
    assert parse_spec(two, "f.yaml", spec_dir).worker_count() == 3
    (issue,) = issues(writer + "workers: 1\n", spec_dir)
    assert issue.startswith("changes.reviewers_per_change: 1 reviewer(s) per change need at least 2 workers"), issue
    unreviewed = writer + "workers: 1\nchanges: {reviewers_per_change: 0}\n"
    assert parse_spec(unreviewed, "f.yaml", spec_dir).worker_count() == 1


def test_agents_groups_give_per_worker_kinds(spec_dir: Path) -> None:
    text = "workdir: .\nagents:\n  - {workers: 2}\n  - {model: other, workers: 1}\ntasks:\n  - goal: a\n"
    spec = parse_spec(text, "f.yaml", spec_dir)
    assert spec.agent_models() == {1: ("claude", None), 2: ("claude", None), 3: ("claude", "other")}

"""The `{{name}}` placeholders of briefs and offline scripts (orch/spec/placeholders.py): filled, and an unknown
one refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from orch.spec.load import parse_spec
from orch.spec.placeholders import render, render_steps
from tests.lead.specs import GOOD

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network


def test_render_rejects_unknown_placeholders() -> None:
    assert render("a {{x}} b", {"x": "1"}) == "a 1 b"
    with pytest.raises(Exception, match="unknown placeholder"):
        render("{{y}}", {"x": "1"})


def test_tool_steps_are_valid_and_rendered(spec_dir: Path) -> None:
    text = (
        GOOD
        + "    offline_script:\n      - {tool: WebFetch, input: {url: 'http://x/{{task_id}}', n: [1, '{{job}}']}}\n"
    )
    spec = parse_spec(text, "fleet.yaml", spec_dir)
    steps = spec.tasks[0].offline_script
    assert steps is not None
    assert render_steps(steps, {"task_id": "t1", "job": "t1@ab"}) == [
        {"tool": "WebFetch", "input": {"url": "http://x/t1", "n": [1, "t1@ab"]}}
    ]

"""orch/jsonsample.py: the one value made up for a JSON schema (replay's and the scripted model's titles)."""

from __future__ import annotations

import json

import pytest

from orch.jsonsample import sample, sample_text

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

TITLE = {"type": "object", "properties": {"title": {"type": "string"}, "n": {"type": "integer"}}}


@pytest.mark.parametrize(
    ("schema", "number", "expected"),
    [
        (TITLE, 0, {"title": "Scripted session", "n": 0}),
        ({"type": "OBJECT", "properties": {"title": {"type": "STRING"}, "n": {"type": "NUMBER"}}}, 1,
         {"title": "Scripted session", "n": 1}),  # Gemini CLI's upper-case types
        ({"enum": ["a", "b"], "type": "string"}, 0, "a"),
        ({"enum": [], "type": "boolean"}, 0, False),  # an empty enum is no enum
        ({"type": "array"}, 0, []),
        ({"type": "object", "properties": {"bad": "string", "ok": {"type": "boolean"}}}, 0, {"ok": False}),
        ({"type": "object", "properties": ["not", "a", "dict"]}, 0, {}),
        ({"type": "null"}, 0, None),
        ("not a schema", 0, None),
    ],
)  # fmt: skip
def test_a_sample_satisfies_the_schema(schema: object, number: int, expected: object) -> None:
    assert sample(schema, "Scripted session", number) == expected


def test_the_text_of_an_answer_is_the_samples_json_or_the_text_when_no_schema_is_asked_for() -> None:
    assert json.loads(sample_text(TITLE, "Replayed", 2)) == {"title": "Replayed", "n": 2}
    assert sample_text(None, "Replayed") == sample_text("not a schema", "Replayed") == "Replayed"


def test_a_schema_nested_past_the_depth_is_cut_not_a_recursion_error() -> None:
    """The schema is a worker's: nested 5,000 deep (parsed fine by json) it still gets an answer."""
    schema: dict[str, object] = {"type": "string"}
    for _ in range(5000):
        schema = {"type": "object", "properties": {"x": schema}}
    depth, got = 0, sample(schema, "t")
    while isinstance(got, dict):
        depth, got = depth + 1, got["x"]
    assert got is None and depth == 33
    assert sample_text(schema, "t").startswith('{"x": {"x":')

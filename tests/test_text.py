"""orch.text: the one shortener of one-line messages, and a pydantic error on one line."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from orch.text import error_line, first_error, shorten, strings_in

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("short", 10, "short"),
        ("exactly10!", 10, "exactly10!"),
        ("one more char", 10, "one more…"),
        ("  spread\nover\tlines  ", 80, "spread over lines"),
        (None, 80, "None"),
    ],
    ids=["fits", "at-limit", "cut", "whitespace", "object"],
)
def test_shorten(text: object, limit: int, expected: str) -> None:
    assert shorten(text, limit) == expected
    assert len(shorten(text, limit)) <= limit


class _Inner(BaseModel):
    n: int


class _Outer(BaseModel):
    items: list[_Inner]


def _error(data: object) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        _Outer.model_validate(data)
    return caught.value


def test_first_error_names_where_and_what_and_the_whole_value_when_no_field_is_wrong() -> None:
    second = _error({"items": [{"n": 1}, {"n": "x"}]})
    assert first_error(second).startswith("items.1.n: Input should be a valid integer")
    assert first_error(_error({})) == "items: Field required"
    whole = _error("not a mapping")
    assert first_error(whole).startswith("Input should be a valid dictionary")  # no field, no name: what alone
    assert first_error(whole, "the file").startswith("the file: Input should be a valid dictionary")
    assert error_line(whole.errors()[0], "(top level)") == first_error(whole, "(top level)")


def test_strings_in_finds_every_string_of_a_nested_value_and_nothing_else() -> None:
    value = {"a": "x", "b": [1, "y", {"c": ["z", None, True]}], "d": 2.5}
    assert list(strings_in(value)) == ["x", "y", "z"]
    assert list(strings_in("alone")) == ["alone"] and list(strings_in(7)) == []

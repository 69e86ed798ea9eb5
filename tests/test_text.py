"""orch.text.shorten: the one shortener of one-line messages."""

from __future__ import annotations

import pytest

from orch.text import shorten

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

"""Text for one-line messages: the one shortener orch uses in errors, commentary and tables."""

from __future__ import annotations

from collections.abc import Iterable

ELLIPSIS = "…"


def shorten(text: object, limit: int) -> str:
    """`text` on one line (every run of whitespace as one space), cut to `limit` characters, "…" marking a cut."""
    one = " ".join(str(text).split())
    return one if len(one) <= limit else one[: limit - 1].rstrip() + ELLIPSIS


def join_numbers(numbers: Iterable[int]) -> str:
    """Worker numbers for a message: `1, 2, 5`."""
    return ", ".join(str(n) for n in sorted(numbers))

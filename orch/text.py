"""Text for one-line messages: the one shortener orch uses in errors, commentary and tables."""

from __future__ import annotations

ELLIPSIS = "…"


def shorten(text: object, limit: int) -> str:
    """`text` on one line (every run of whitespace as one space), cut to `limit` characters, "…" marking a cut."""
    one = " ".join(str(text).split())
    return one if len(one) <= limit else one[: limit - 1].rstrip() + ELLIPSIS

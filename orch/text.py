"""Text for one-line messages: the one shortener orch uses in errors, commentary and tables."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only the annotations: the worker-side programs that import this module never load pydantic
    from pydantic import ValidationError
    from pydantic_core import ErrorDetails

ELLIPSIS = "…"


def shorten(text: object, limit: int) -> str:
    """`text` on one line (every run of whitespace as one space), cut to `limit` characters, "…" marking a cut."""
    one = " ".join(str(text).split())
    return one if len(one) <= limit else one[: limit - 1].rstrip() + ELLIPSIS


def join_numbers(numbers: Iterable[int]) -> str:
    """Worker numbers for a message: `1, 2, 5`."""
    return ", ".join(str(n) for n in sorted(numbers))


def error_line(error: ErrorDetails, whole: str = "") -> str:
    """One pydantic error as `where: what` (`where` the dotted field path, `whole` when the error is about
    the value as a whole; with neither, `what` alone)."""
    where = ".".join(str(part) for part in error["loc"]) or whole
    return f"{where}: {error['msg']}" if where else error["msg"]


def first_error(exc: ValidationError, whole: str = "") -> str:
    """A ValidationError's first error on one line (error_line): what a one-line message of bad input says."""
    return error_line(exc.errors(include_url=False)[0], whole)


def strings_in(value: object) -> Iterator[str]:
    """Every string inside a parsed JSON or YAML value (a tool's input may nest mappings and lists)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)

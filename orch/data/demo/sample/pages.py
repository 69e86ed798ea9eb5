"""Pagination helpers: split a list into pages of a fixed size."""

from __future__ import annotations


def page_count(total: int, size: int) -> int:
    """How many pages `total` items fill, `size` per page."""
    if size <= 0:
        raise ValueError("size must be positive")
    return (total + size - 1) // size


def paginate(items: list[int], page: int, size: int) -> list[int]:
    """The items on `page`; pages are numbered from 1."""
    start = page * size
    return items[start : start + size]

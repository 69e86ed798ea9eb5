"""Two setups measured side by side: interleaved, the first of each pair alternating, so both see the same
machine state (a load that rises during a bench weighs on both alike); each row then takes the median of its
samples (bench/table.py), and a ratio row pairs the samples of one repeat."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

K = TypeVar("K")
T = TypeVar("T")


def in_turn(repeat: int, first: K, second: K) -> tuple[K, K]:
    """The order of one repeat's pair: `first` first in even repeats, `second` first in odd ones."""
    return (first, second) if repeat % 2 == 0 else (second, first)


def paired(repeats: int, measure: Callable[[K], T], first: K, second: K) -> tuple[list[T], list[T]]:
    """measure(first) and measure(second), `repeats` times each, in turn: the samples of each, by repeat."""
    got: dict[int, list[T]] = {0: [], 1: []}
    for repeat in range(repeats):
        for which in in_turn(repeat, 0, 1):
            got[which].append(measure(first if which == 0 else second))
    return got[0], got[1]


def ratios(mine: Sequence[float] | Mapping[int, float], theirs: Sequence[float] | Mapping[int, float]) -> list[float]:
    """mine / theirs per repeat (a list by position, a mapping by repeat number), leaving out a repeat that
    either side lacks or where theirs is zero (a failed or empty sample)."""
    a = dict(enumerate(mine)) if isinstance(mine, Sequence) else dict(mine)
    b = dict(enumerate(theirs)) if isinstance(theirs, Sequence) else dict(theirs)
    return [a[r] / b[r] for r in sorted(a) if b.get(r)]

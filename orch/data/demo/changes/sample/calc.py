"""A tiny calculator (the workdir of `orch demo --changes`)."""

from __future__ import annotations


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def clamp(x: float, low: float, high: float) -> float:
    return max(low, min(x, high))

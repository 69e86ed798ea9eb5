"""Placeholder: the Confinement type (filled in by the seam's phase 2)."""

from __future__ import annotations

from typing import Protocol


class Confinement(Protocol):
    """How a run's workers are kept apart where its tmux server runs."""

    name: str

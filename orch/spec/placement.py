"""A fleet spec's `placement:`: where on a swarm's nodes its run may go (orch.backends.swarm takes it; another
backend refuses a spec that sets it, at its line: orch.entry.preflight)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, WithJsonSchema

from orch.run.records import Strict

SWARM_CONSTRAINT = re.compile(r"^[A-Za-z0-9_.\-]+\s*(==|!=)\s*\S+$")
"""A Swarm placement constraint: `node.labels.zone==eu`, `node.role!=manager`, `node.hostname==w1`."""


def _constraint(value: str) -> str:
    if not SWARM_CONSTRAINT.match(value):
        raise ValueError(f"{value!r}: expected KEY==VALUE or KEY!=VALUE (node.labels.zone==eu)")
    return value


class PlacementSpec(Strict):
    """Where on a swarm's nodes the run may go (`--backend swarm`; another backend refuses a spec that sets it)."""

    constraints: list[
        Annotated[
            str, AfterValidator(_constraint), WithJsonSchema({"type": "string", "pattern": SWARM_CONSTRAINT.pattern})
        ]
    ] = Field(default_factory=list)
    """Swarm placement constraints, each KEY==VALUE or KEY!=VALUE (`node.labels.zone==eu`, `node.role!=manager`):
    the run goes only on a node that matches every one. `orch run --constraint` adds more."""
    per_node: int | None = Field(default=None, ge=1)
    """At most this many orch runs on one node when this one is placed (default: no cap). `orch run --per-node`
    wins over it."""

    def given(self) -> bool:
        return bool(self.constraints) or self.per_node is not None

"""What every benchmark gets (settings, the private environment) and gives back (rows, raw data)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.env import BenchEnv
from bench.table import Row


@dataclass
class Config:
    quick: bool
    repeat: int
    up_workers: tuple[int, ...]
    overhead_workers: tuple[int, ...]
    overhead_steps: int
    overhead_step_seconds: float
    notice_samples: int
    cli_samples: int
    watch_workers: int
    watch_seconds: float
    poll_interval: float
    bus_writers: int
    bus_posts: int
    memory_budget: int
    profile: bool
    roles_workers: tuple[int, ...] = (1, 4, 16, 32, 64)
    """`roles`: the fleet sizes (each skipped with the reason when the memory does not allow it)."""
    roles_idle_seconds: float = 60.0
    view_workers: tuple[int, ...] = (16, 64)
    """`view`: busy workers `orch watch` shows (64: the most a run may have, orch.run.folder.MAX_WORKERS)."""
    before: str | None = None
    """`--before REV`: also measure orch's sources at this git revision, side by side (bench/starts.py)."""

    @classmethod
    def make(cls, quick: bool, repeat: int | None, memory_budget: int, profile: bool) -> Config:
        if quick:
            return cls(
                quick=True,
                repeat=repeat or 1,
                up_workers=(1, 2),
                overhead_workers=(2,),
                overhead_steps=2,
                overhead_step_seconds=0.5,
                notice_samples=50,
                cli_samples=3,
                watch_workers=2,
                watch_seconds=5.0,
                poll_interval=2.0,
                bus_writers=4,
                bus_posts=100,
                memory_budget=memory_budget,
                profile=profile,
                roles_workers=(1, 2),
                roles_idle_seconds=5.0,
                view_workers=(2,),
            )
        return cls(
            quick=False,
            repeat=repeat or 3,
            up_workers=(1, 2, 4, 8, 16),
            overhead_workers=(1, 4, 8, 16),
            overhead_steps=8,
            overhead_step_seconds=2.0,
            notice_samples=500,
            cli_samples=30,
            watch_workers=16,
            watch_seconds=60.0,
            poll_interval=2.0,
            bus_writers=16,
            bus_posts=1000,
            memory_budget=memory_budget,
            profile=profile,
        )


@dataclass
class MemorySample:
    """Per-worker agent-tree memory seen in one situation (bytes, one entry per worker)."""

    situation: str
    workers: int
    rss: list[int]
    pss: list[int]
    tmux_rss: int


@dataclass
class Context:
    config: Config
    env: BenchEnv
    memory: list[MemorySample] = field(default_factory=list)


@dataclass
class Result:
    rows: list[Row] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)
    skipped: str | None = None

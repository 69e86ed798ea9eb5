"""`up` -> all N workers ready (their SessionStart hooks seen), for each N; its ratio to N = 1.

Where the time goes comes from /proc: CPU seconds spent by orch itself (this process and the tmux
clients and `claude --version` it runs), by the agents' process trees and by the tmux server. With C
cores the work cannot finish faster than (total CPU) / C: the "CPU floor" in the notes.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import statistics
from typing import Any

from bench import procs
from bench.core import Context, MemorySample, Result
from bench.env import BenchEnv, Fleet
from bench.table import Row, Target

RATIO_N = 8
RATIO_TARGET = Target("<=", 1.3, "<= 1.3x N=1")


def _cpu_self() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def measure(env: BenchEnv, workers: int, memory: list[MemorySample], agent: str = "claude") -> dict[str, Any]:
    cpu0 = _cpu_self()
    live = env.up(f"up{workers}", workers, agent)
    try:
        orch_cpu = _cpu_self() - cpu0
        panes = live.panes()
        agents_cpu = sum(procs.tree_cpu(pid) for pid in panes.values())
        hooks_cpu = sum(procs.tree_reaped_cpu(pid) for pid in panes.values())
        tmux_pid = live.tmux_pid()
        tmux_cpu = procs.own_cpu(tmux_pid)
        mem = [procs.tree_memory(pid) for _, pid in sorted(panes.items())]
        memory.append(
            MemorySample(
                situation="just booted",
                workers=workers,
                rss=[m.rss for m in mem],
                pss=[m.pss for m in mem],
                tmux_rss=procs.rss(tmux_pid) if tmux_pid else 0,
            )
        )
        boots = _boot_offsets(live)
    finally:
        env.kill(live)
    cores = os.cpu_count() or 1
    total = orch_cpu + agents_cpu + tmux_cpu
    return {
        "workers": workers,
        "seconds": live.up_seconds,
        "orch_cpu_s": orch_cpu,
        "agents_cpu_s": agents_cpu,
        "agents_hooks_cpu_s": hooks_cpu,
        "tmux_cpu_s": tmux_cpu,
        "cpu_floor_s": total / cores,
        "first_boot_s": min(boots) if boots else None,
        "last_boot_s": max(boots) if boots else None,
    }


def _boot_offsets(live: Fleet) -> list[float]:
    """Seconds from the run's creation to each worker's SessionStart (hook timestamps, wall clock)."""
    created = live.info.created.timestamp()
    out = []
    for n in range(1, live.info.workers + 1):
        starts = [e.ts for e in live.run.hook_events(n) if e.hook_event_name == "SessionStart"]
        if starts:
            out.append(starts[0] - created)
    return out


def profile_up(env: BenchEnv, workers: int) -> list[str]:
    """cProfile of orch's side of one `up` (the agents run in their own processes)."""
    profiler = cProfile.Profile()
    profiler.enable()
    live = env.up(f"prof{workers}", workers)
    profiler.disable()
    env.kill(live)
    buffer = io.StringIO()
    pstats.Stats(profiler, stream=buffer).sort_stats("cumulative").print_stats(25)
    return buffer.getvalue().splitlines()


def run(ctx: Context) -> Result:
    cfg = ctx.config
    tries: list[dict[str, Any]] = []
    for _ in range(cfg.repeat):
        for n in cfg.up_workers:  # N interleaved within each repeat: slow drift hits every N alike
            tries.append(measure(ctx.env, n, ctx.memory))
    rows = []
    base = [t["seconds"] for t in tries if t["workers"] == 1]
    for n in cfg.up_workers:
        mine = [t for t in tries if t["workers"] == n]
        seconds = [t["seconds"] for t in mine]
        note = (
            f"CPU per up: orch {statistics.median(t['orch_cpu_s'] for t in mine):.2f}s, "
            f"agents {statistics.median(t['agents_cpu_s'] for t in mine):.2f}s "
            f"(child commands: hooks, git... {statistics.median(t['agents_hooks_cpu_s'] for t in mine):.2f}s), "
            f"tmux {statistics.median(t['tmux_cpu_s'] for t in mine):.2f}s; "
            f"floor on {os.cpu_count()} cores {statistics.median(t['cpu_floor_s'] for t in mine):.2f}s"
        )
        rows.append(Row("up", f"up -> {n} ready", "s", seconds, note=note))
        if n != 1 and base:
            ratios = [s / b for s, b in zip(seconds, base, strict=False)]
            rows.append(Row("up", f"ratio N={n} / N=1", "x", ratios, RATIO_TARGET if n == RATIO_N else None))
    raw: dict[str, Any] = {"tries": tries}
    if cfg.profile:
        raw["profile"] = profile_up(ctx.env, max(cfg.up_workers))
    return Result(rows=rows, raw=raw)

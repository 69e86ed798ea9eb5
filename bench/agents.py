"""The same figures for each agent CLI, side by side: `up` -> ready for N=1 and N=4, RSS per worker just
booted and after a scripted task, and brief -> done for one worker (its overhead over the worker's own
span). Each agent runs on the recording model server through the run's gateway, as in the other
benchmarks; an agent whose binary is missing is skipped with the reason.
"""

from __future__ import annotations

import statistics
from typing import Any

from bench import overhead, up
from bench.core import Context, MemorySample, Result
from bench.report import Row

AGENTS = ("claude", "gemini")
SIZES = (1, 4)
MIB = 1 << 20


def _rss(samples: list[MemorySample], situation: str) -> list[float]:
    return [statistics.median(s.rss) / MIB for s in samples if s.situation == situation and s.rss]


def measure_agent(ctx: Context, agent: str) -> tuple[list[Row], dict[str, Any]]:
    cfg = ctx.config
    memory: list[MemorySample] = []
    ups: list[dict[str, Any]] = []
    briefs: list[dict[str, Any]] = []
    for _ in range(cfg.repeat):
        for n in SIZES:
            ups.append(up.measure(ctx.env, n, memory, agent))
        briefs.append(overhead.measure(ctx, 1, agent, memory))
    rows = []
    for n in SIZES:
        seconds = [t["seconds"] for t in ups if t["workers"] == n]
        cpu = statistics.median(t["agents_cpu_s"] for t in ups if t["workers"] == n)
        rows.append(Row("agents", f"{agent}: up -> {n} ready", "s", seconds, note=f"agents' CPU {cpu:.2f}s"))
    rows.append(
        Row("agents", f"{agent}: RSS per worker, just booted (N={max(SIZES)})", "MiB", _rss(memory, "just booted"))
    )
    rows.append(
        Row("agents", f"{agent}: RSS per worker, after a task (N=1)", "MiB", _rss(memory, "after a scripted task"))
    )
    work = f"{cfg.overhead_steps} x `sleep {cfg.overhead_step_seconds:g}` + result + flag"
    rows.append(Row("agents", f"{agent}: brief -> done (N=1)", "s", [t["wall_s"] for t in briefs], note=work))
    rows.append(Row("agents", f"{agent}: overhead over its own span", "%", [t["overhead_pct"] for t in briefs]))
    return rows, {"up": ups, "brief": briefs, "memory": [vars(s) for s in memory]}


def run(ctx: Context) -> Result:
    rows: list[Row] = []
    raw: dict[str, Any] = {}
    for agent in AGENTS:
        missing = ctx.env.claude_missing(agent)
        if missing:
            rows.append(Row("agents", f"{agent}: skipped", "", status="SKIPPED", note=missing))
            raw[agent] = {"skipped": missing}
            continue
        agent_rows, raw[agent] = measure_agent(ctx, agent)
        rows += agent_rows
    return Result(rows=rows, raw=raw)

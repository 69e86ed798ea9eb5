"""Orchestration overhead: brief N workers with equal scripted work (side by side, as `orch run` does),
wait for every done flag.

Per worker, its own work span runs from the moment its brief was acknowledged (UserPromptSubmit hook)
to its done flag (file mtime). The fleet's wall time runs from the first `brief` call to `wait`
returning. Overhead = wall / slowest span - 1: what briefing the workers and noticing the flags add
on top of the slowest worker's own work. Against N = 1 the wall time also shows contention
(N agents sharing the machine's cores), reported beside it with no target.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from typing import Any

from bench import procs
from bench.core import Context, MemorySample, Result
from bench.env import BenchError, Fleet
from bench.table import Row, Target
from orch.fleet import control, talk
from orch.run.events import Event
from orch.run.records import ControllerEvent

TARGET = Target("<=", 10.0, "<= 10 %")


def brief_text(live: Fleet, n: int, steps: int, step_seconds: float) -> str:
    """A brief whose script does `steps` tool calls of `step_seconds` each, writes a result, flags done."""
    run = live.run
    log = live.run.root / f"work-{n}.log"
    script: list[dict[str, Any]] = [
        {"bash": f"sleep {step_seconds:g} && echo step {k} >> {log}"} for k in range(1, steps + 1)
    ]
    script += [
        {"write": str(run.result(n)), "content": f"# Result of worker {n}\n{steps} steps done\n"},
        {"bash": f"touch {run.done(n)}"},
        {"reply": "Finished."},
    ]
    body = "\n".join(json.dumps(step) for step in script)
    return f"# Benchmark task for worker {n}\n\nDo the scripted steps below.\n\n```orch-script\n{body}\n```\n"


def controller_events(live: Fleet, name: Event) -> list[ControllerEvent]:
    out = []
    for line in live.run.events.read_text().splitlines():
        try:
            event = ControllerEvent.model_validate_json(line)
        except ValueError:
            continue
        if event.event == name:
            out.append(event)
    return out


def measure(
    ctx: Context, workers: int, agent: str = "claude", memory: list[MemorySample] | None = None
) -> dict[str, Any]:
    """One brief -> all done of `workers` workers of `agent`; its memory sample goes to `memory` (default
    ctx.memory, the Claude Code figures)."""
    cfg = ctx.config
    live = ctx.env.up(f"ovh{workers}", workers, agent)
    try:
        texts = {n: brief_text(live, n, cfg.overhead_steps, cfg.overhead_step_seconds) for n in range(1, workers + 1)}
        roots = live.panes()
        agents0 = sum(procs.tree_cpu(pid) for pid in roots.values())
        wall0, start = time.time(), time.monotonic()
        failed = {n: exc for n, exc in talk.brief_many(live.run, texts).items() if exc is not None}
        if failed:
            raise BenchError(f"briefs not delivered: {failed}")
        briefed = time.monotonic() - start
        timeout = 120 + workers * 15 + cfg.overhead_steps * (cfg.overhead_step_seconds + 10) * 2
        control.wait(live.run, None, timeout)
        wall = time.monotonic() - start
        noticed_at = time.time()
        agents_cpu = sum(procs.tree_cpu(pid) for pid in roots.values()) - agents0
        enters = [e.data.get("enters", 1) for e in controller_events(live, Event.SENT)]
        spans, lags = [], []
        for n in range(1, workers + 1):
            acks = [e.ts for e in live.run.hook_events(n) if e.hook_event_name == "UserPromptSubmit" and e.ts >= wall0]
            if not acks:
                raise BenchError(f"worker {n} has no UserPromptSubmit after its brief")
            done = live.run.done(n).stat().st_mtime
            spans.append(done - acks[0])
            lags.append(acks[0] - wall0)
        last_flag = max(live.run.done(n).stat().st_mtime for n in range(1, workers + 1))
        panes = live.panes()
        mem = [procs.tree_memory(pid) for _, pid in sorted(panes.items())]
        tmux_pid = live.tmux_pid()
        (ctx.memory if memory is None else memory).append(
            MemorySample(
                situation="after a scripted task",
                workers=workers,
                rss=[m.rss for m in mem],
                pss=[m.pss for m in mem],
                tmux_rss=procs.rss(tmux_pid) if tmux_pid else 0,
            )
        )
    finally:
        ctx.env.kill(live)
    slowest = max(spans)
    return {
        "workers": workers,
        "wall_s": wall,
        "brief_dispatch_s": briefed,
        "briefs_needing_a_second_enter": sum(1 for e in enters if e > 1),
        "agents_cpu_s": agents_cpu,
        "cpu_floor_s": agents_cpu / (os.cpu_count() or 1),
        "slowest_span_s": slowest,
        "median_span_s": statistics.median(spans),
        "last_brief_ack_s": max(lags),
        "notice_lag_s": noticed_at - last_flag,
        "overhead_pct": (wall / slowest - 1) * 100,
    }


def run(ctx: Context) -> Result:
    cfg = ctx.config
    tries: list[dict[str, Any]] = []
    for _ in range(cfg.repeat):
        for n in cfg.overhead_workers:
            tries.append(measure(ctx, n))
    work = f"{cfg.overhead_steps} x `sleep {cfg.overhead_step_seconds:g}` steps + result + flag"
    rows = []
    alone = [t["wall_s"] for t in tries if t["workers"] == 1]
    for n in cfg.overhead_workers:
        mine = [t for t in tries if t["workers"] == n]
        note = (
            f"work: {work}; slowest span {statistics.median(t['slowest_span_s'] for t in mine):.1f}s, "
            f"briefing all took {statistics.median(t['brief_dispatch_s'] for t in mine):.1f}s "
            f"({sum(t['briefs_needing_a_second_enter'] for t in mine)} of {n * len(mine)} briefs needed a 2nd Enter), "
            f"agents' CPU floor {statistics.median(t['cpu_floor_s'] for t in mine):.1f}s, "
            f"last flag noticed after {statistics.median(t['notice_lag_s'] for t in mine) * 1000:.0f} ms"
        )
        rows.append(Row("overhead", f"brief -> {n} done", "s", [t["wall_s"] for t in mine], note=note))
        rows.append(
            Row("overhead", f"overhead over slowest worker, N={n}", "%", [t["overhead_pct"] for t in mine], TARGET)
        )
        if n != 1 and alone:
            ratios = [t["wall_s"] / a for t, a in zip(mine, alone, strict=False)]
            rows.append(Row("overhead", f"N={n} wall / 1 worker alone", "x", ratios, note="includes CPU contention"))
    return Result(rows=rows, raw={"tries": tries, "work": work})

"""What watching costs: controller CPU over S seconds with N idle workers, and the lead's model tokens.

The watcher is what a controller runs while it waits: `orch wait NAME` on done flags that do not come
(inotify, blocked) plus a status loop (`fleet.status` every --poll-interval seconds: one `tmux list-panes`
and the hook files) for nudges and crash detection. Their steady-state CPU (interpreter start excluded:
the controller starts once) over the window is the figure. If `orch.controller` exists it is named in
the notes; it has no watch-only entry point to measure yet.

Tokens: every model request during the window is attributed through Claude Code's session header to a
worker's SessionStart; anything else was spent by someone who is not a worker (the lead).
"""

from __future__ import annotations

import importlib.util
import json
import time
from typing import Any

from bench import procs
from bench.core import Context, MemorySample, Result
from bench.env import BenchError, Lines, helper, orch_cli, popen, stop, wait_watching
from bench.report import Row, Target


def run(ctx: Context) -> Result:
    cfg = ctx.config
    tries = [measure(ctx) for _ in range(cfg.repeat)]
    label = f"{cfg.watch_workers} idle workers, {cfg.watch_seconds:g} s"
    controller = importlib.util.find_spec("orch.controller") is not None
    extra = "; orch.controller exists but is not what was measured" if controller else ""

    def values(key: str) -> list[float]:
        return [float(t[key]) for t in tries]

    rows = [
        Row(
            "watch",
            f"controller CPU ({label})",
            "% core",
            values("controller_pct"),
            Target("<=", 2.0, "<= 2 %"),
            note=f"`orch wait` + status every {cfg.poll_interval:g} s{extra}",
        ),
        Row("watch", "of which `orch wait`", "% core", values("wait_pct")),
        Row(
            "watch",
            "of which status polling",
            "% core",
            values("poll_pct"),
            note="fleet.status: tmux list-panes + hook files, tmux clients included",
        ),
        Row("watch", "tmux server while watched", "% core", values("tmux_pct")),
        Row("watch", f"agents while idle ({cfg.watch_workers} in total)", "% core", values("agents_pct")),
        Row("watch", "lead model requests while watching", "requests", values("lead_requests"), Target("==", 0, "0")),
        Row("watch", "lead model tokens while watching", "tokens", values("lead_tokens"), Target("==", 0, "0")),
        Row("watch", "worker model requests while idle", "requests", values("worker_requests")),
    ]
    return Result(rows=rows, raw={"tries": tries, "controller_module": controller})


def measure(ctx: Context) -> dict[str, Any]:
    cfg, env = ctx.config, ctx.env
    live = env.up("watch", cfg.watch_workers)
    waiter = poller = None
    try:
        run = live.run
        waiter = popen(orch_cli("wait", run.name, "--timeout", str(cfg.watch_seconds + 120)), stdin=False)
        poller = popen(helper("poller", run.name, str(cfg.poll_interval), str(cfg.watch_seconds)), stdin=False)
        polls = Lines(poller, "status poller")
        wait_watching(waiter.pid, run.root.stat().st_ino, timeout=60.0)
        polls.next(60.0)  # warm
        panes = live.panes()
        tmux_pid = live.tmux_pid()
        wait_cpu0 = procs.cpu_times(waiter.pid)
        agents0 = sum(procs.tree_cpu(pid) for pid in panes.values())
        tmux0 = procs.own_cpu(tmux_pid)
        t0 = time.monotonic_ns()
        report = json.loads(polls.next(cfg.watch_seconds + 60))
        t1 = time.monotonic_ns()
        wait_cpu1 = procs.cpu_times(waiter.pid)
        agents1 = sum(procs.tree_cpu(pid) for pid in panes.values())
        tmux1 = procs.own_cpu(tmux_pid)
        if waiter.poll() is not None or wait_cpu0 is None or wait_cpu1 is None:
            raise BenchError(f"`orch wait` ended early ({waiter.poll()})")
        mem = [procs.tree_memory(pid) for _, pid in sorted(panes.items())]
        ctx.memory.append(
            MemorySample(
                situation=f"idle {cfg.watch_seconds:g} s",
                workers=cfg.watch_workers,
                rss=[m.rss for m in mem],
                pss=[m.pss for m in mem],
                tmux_rss=procs.rss_bytes(tmux_pid) if tmux_pid else 0,
            )
        )
        sessions = live.sessions()
    finally:
        for proc in (waiter, poller):
            if proc is not None:
                stop(proc)
        env.kill(live)
    window = (t1 - t0) / 1e9
    in_window = [r for r in env.requests() if t0 <= r.t_ns <= t1]
    lead = [r for r in in_window if r.session not in sessions]
    wait_pct = (wait_cpu1.total - wait_cpu0.total) / window * 100
    poll_pct = report["cpu_s"] / report["wall_s"] * 100
    return {
        "window_s": window,
        "polls": report["polls"],
        "wait_pct": wait_pct,
        "poll_pct": poll_pct,
        "controller_pct": wait_pct + poll_pct,
        "tmux_pct": (tmux1 - tmux0) / window * 100,
        "agents_pct": (agents1 - agents0) / window * 100,
        "lead_requests": len(lead),
        "lead_tokens": sum(r.tokens for r in lead),
        "worker_requests": len(in_window) - len(lead),
    }

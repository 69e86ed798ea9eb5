"""What watching costs: controller CPU over S seconds with N idle workers, and the lead's model tokens.

The watcher is what a controller runs while it waits: `orch wait NAME` on done flags that do not come
(inotify, blocked) plus a status loop (`watch.status` every --poll-interval seconds: one `tmux list-panes` and
the hook files) for nudges and crash detection. Their steady-state CPU (interpreter start excluded: the
controller starts once) over the window is the figure. The real controller is measured too: `orch run SPEC
--local` with one task per worker whose brief the worker reads and then leaves idle without a done flag
(nudges are set far beyond the window), so the controller watches N idle workers; its process CPU (tmux
clients it reaps included) over the window.

Tokens: every model request during the window is attributed through Claude Code's session header to a
worker's SessionStart; anything else was spent by someone who is not a worker (the lead).
"""

from __future__ import annotations

import json
import os
import select
import statistics
import subprocess
import time
from typing import Any

from bench import procs
from bench.core import Context, MemorySample, Result
from bench.env import BenchError, Fleet, Lines, helper, orch_cli, popen, python_env, stop, wait_watching
from bench.table import Row, Target
from orch.run.folder import RunFolder
from orch.waits import wait_until

SETTLE_TIMEOUT = 300.0


def run(ctx: Context) -> Result:
    cfg = ctx.config
    tries = [measure(ctx) for _ in range(cfg.repeat)]
    label = f"{cfg.watch_workers} idle workers, {cfg.watch_seconds:g} s"
    runs = [measure_controller(ctx) for _ in range(cfg.repeat)]
    target = Target("<=", 2.0, "<= 2 %")

    def values(key: str) -> list[float]:
        return [float(t[key]) for t in tries]

    zero = Target("==", 0, "0")
    wakeups = statistics.median(r["wakeups_per_s"] for r in runs)
    rows = [
        Row(
            "watch",
            f"`orch run` controller CPU ({label})",
            "% core",
            [r["controller_pct"] for r in runs],
            target,
            note=f"the automated lead; {wakeups:.1f} voluntary context switches/s",
        ),
        Row(
            "watch",
            "lead model tokens, `orch run` watching",
            "tokens",
            [r["lead_tokens"] for r in runs],
            zero,
            note="requests from no worker's session",
        ),
    ]
    rows += [
        Row(
            "watch",
            f"`orch wait` + status loop CPU ({label})",
            "% core",
            values("controller_pct"),
            target,
            note=f"a CLI-driven lead: `orch wait` + fleet.status every {cfg.poll_interval:g} s",
        ),
        Row("watch", "of which `orch wait`", "% core", values("wait_pct")),
        Row(
            "watch",
            "of which status polling",
            "% core",
            values("poll_pct"),
            note="tmux list-panes + hook files, tmux clients included",
        ),
        Row("watch", "tmux server while watched", "% core", values("tmux_pct")),
        Row("watch", f"agents while idle ({cfg.watch_workers} in total)", "% core", values("agents_pct")),
        Row("watch", "lead model requests while watching", "requests", values("lead_requests"), zero),
        Row("watch", "lead model tokens while watching", "tokens", values("lead_tokens"), zero),
        Row("watch", "worker model requests while idle", "requests", values("worker_requests")),
    ]
    return Result(rows=rows, raw={"tries": tries, "controller_runs": runs})


def measure(ctx: Context) -> dict[str, Any]:
    cfg, env = ctx.config, ctx.env
    live = env.up("watch", cfg.watch_workers)
    waiter = poller = None
    try:
        run = live.run
        waiter = popen(orch_cli("wait", run.name, "--timeout", str(cfg.watch_seconds + 120)), stdin=False)
        poller = popen(helper("poller", run.name, str(cfg.poll_interval), str(cfg.watch_seconds)), stdin=False)
        polls = Lines(poller, "status poller")
        wait_watching(waiter.pid, run.done(1).parent.stat().st_ino)
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
                tmux_rss=procs.rss(tmux_pid) if tmux_pid else 0,
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


def spec_text(name: str, workdir: str, workers: int) -> str:
    """A fleet spec: one task per worker, nudges and deadlines far beyond the measurement window."""
    tasks = "\n".join(
        f"  - id: t{n}\n    role: finder\n    goal: Determine whether file number {n} exists."
        for n in range(1, workers + 1)
    )
    return (
        f"name: {name}\nworkdir: {workdir}\nagent: claude\nworkers: {workers}\ndispatch: per-worker\n"
        f"tasks:\n{tasks}\n"
        "timeouts:\n  boot: 180\n  job: 7200\n  run: 7200\n"
        "limits:\n  nudge_after: 7200\n"
        "offline: false\nteardown: true\n"
    )


def _settled(run: RunFolder, workers: int) -> bool:
    """Every worker got its brief and went idle (Stop) after it."""
    if not run.exists():
        return False
    for n in range(1, workers + 1):
        names = [e.hook_event_name for e in run.hook_events(n)]
        if "UserPromptSubmit" not in names or names[-1] != "Stop":
            return False
    return True


def measure_controller(ctx: Context) -> dict[str, Any]:
    """`orch run` (the automated lead) watching N idle workers: its own CPU over the window."""
    cfg, env = ctx.config, ctx.env
    env.model()  # not offline: the workers talk to our recording server, so requests are attributed
    name = env.name("lead")
    spec = env.root / f"{name}.yaml"
    spec.write_text(spec_text(name, str(env.workdir(name)), cfg.watch_workers))
    log = (env.root / f"{name}.log").open("wb")
    proc = subprocess.Popen(
        orch_cli("run", str(spec), "--local", "--name", name),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        env=python_env(),
    )
    run = RunFolder.for_name(name)
    live: Fleet | None = None
    try:
        wait_until(
            lambda: proc.poll() is not None or _settled(run, cfg.watch_workers),
            SETTLE_TIMEOUT,
            "the workers to read their briefs and go idle",
            interval=0.2,
        )
        if proc.poll() is not None:
            raise BenchError(f"orch run exited {proc.returncode} before its workers settled; see {log.name}")
        live = Fleet(run, run.info(), 0.0)
        panes = live.panes()
        agents0 = sum(procs.tree_cpu(pid) for pid in panes.values())
        cpu0, events0 = procs.cpu_times(proc.pid), _hook_lines(run, cfg.watch_workers)
        switches0 = procs.voluntary_switches(proc.pid)
        t0 = time.monotonic_ns()
        pidfd = os.pidfd_open(proc.pid)
        try:  # the window: it ends early only if the controller exits, which is an error
            ended, _, _ = select.select([pidfd], [], [], cfg.watch_seconds)
        finally:
            os.close(pidfd)
        t1 = time.monotonic_ns()
        cpu1 = procs.cpu_times(proc.pid)
        switches1 = procs.voluntary_switches(proc.pid)
        agents1 = sum(procs.tree_cpu(pid) for pid in panes.values())
        if ended or cpu0 is None or cpu1 is None:
            raise BenchError(f"orch run exited ({proc.poll()}) while watching; see {log.name}")
        sessions = live.sessions()
        events = _hook_lines(run, cfg.watch_workers) - events0
    finally:
        if live is None and run.exists():
            live = Fleet(run, run.info(), 0.0)
        if live is not None:
            env.kill(live)  # the controller sees its fleet gone and ends
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            stop(proc)
        log.close()
    window = (t1 - t0) / 1e9
    in_window = [r for r in env.requests() if t0 <= r.t_ns <= t1]
    lead = [r for r in in_window if r.session not in sessions]
    return {
        "window_s": window,
        "controller_pct": (cpu1.total - cpu0.total) / window * 100,
        "agents_pct": (agents1 - agents0) / window * 100,
        "hook_events_in_window": events,
        "wakeups_per_s": (switches1 - switches0) / window,
        "lead_requests": len(lead),
        "lead_tokens": sum(r.tokens for r in lead),
        "worker_requests": len(in_window) - len(lead),
    }


def _hook_lines(run: RunFolder, workers: int) -> int:
    return sum(len(run.hook_events(n)) for n in range(1, workers + 1))

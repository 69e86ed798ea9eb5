"""Memory per worker (RSS and PSS of the agent process tree under each pane) and the largest N that fits.

Nothing is started here: the up, overhead and watch benchmarks sample every pane's tree through orch.procs
(psutil; `bench.procs.tree_memory`) in three situations: just booted, after a scripted task, idle for a while. RSS
counts pages shared between agents (the Node binary, libraries) once per agent, so it overstates what
one more worker costs; PSS splits shared pages among their sharers. The largest N uses the larger
per-worker median RSS seen (conservative) on top of the tmux server, against the budget.
"""

from __future__ import annotations

import statistics

from bench.core import Context, MemorySample, Result
from bench.table import Row
from orch.run.folder import MAX_WORKERS

MIB = 1 << 20


def run(ctx: Context) -> Result:
    samples = ctx.memory
    if not samples:
        return Result(skipped="no fleet was measured (run it with up, overhead or watch)")
    rows = []
    situations: dict[str, list[MemorySample]] = {}
    for sample in samples:
        situations.setdefault(sample.situation, []).append(sample)
    worst_rss = 0.0
    for situation, group in situations.items():
        biggest = max(s.workers for s in group)
        chosen = [s for s in group if s.workers == biggest]
        rss = [statistics.median(s.rss) / MIB for s in chosen if s.rss]
        pss = [statistics.median(s.pss) / MIB for s in chosen if s.pss]
        rows.append(Row("memory", f"RSS per worker, {situation} (N={biggest})", "MiB", rss))
        rows.append(Row("memory", f"PSS per worker, {situation} (N={biggest})", "MiB", pss))
        worst_rss = max(worst_rss, *rss) if rss else worst_rss
    tmux = max(s.tmux_rss for s in samples) / MIB
    rows.append(Row("memory", "tmux server RSS", "MiB", [tmux]))
    budget = ctx.config.memory_budget / MIB
    largest = int((budget - tmux) // worst_rss) if worst_rss else 0
    note = f"budget {budget / 1024:.1f} GiB / {worst_rss:.0f} MiB per worker (RSS, worst situation)"
    if largest > MAX_WORKERS:
        note += f"; orch caps a run at {MAX_WORKERS}"
    rows.append(Row("memory", f"largest N in {budget / 1024:.1f} GiB", "N", [float(largest)], note=note))
    raw = {
        "samples": [vars(s) for s in samples],
        "budget_bytes": ctx.config.memory_budget,
        "per_worker_rss_mib": worst_rss,
        "largest_n": largest,
    }
    return Result(rows=rows, raw=raw)

"""`orch watch` without a terminal: one snapshot as text (`--once`), or timestamped lines as the run moves."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from orch.gateway.modeldir import NO_TRAFFIC
from orch.text import ELLIPSIS

if TYPE_CHECKING:  # only annotations: `orch up`'s boot bar cuts its line here without loading the view's reader
    from orch.view.snapshot import Snapshot, WorkerTile


def cut(line: str, width: int) -> str:
    """A line of a table cut to `width` (its spacing kept, unlike orch.text.shorten)."""
    return line if len(line) <= width else line[: width - 1] + ELLIPSIS


def clock(ts: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts)) if ts is not None else "--:--:--"


def span(seconds: float) -> str:
    """`42s`, `3m05s`, `1h02m`."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def money(usd: float | None) -> str:
    return f"${usd:.4f}" if usd is not None else "-"


def billing(unbilled: str | None) -> str:
    """Beside a run's cost: why it is $0 before any model traffic, or that nothing was billed (offline, replayed)."""
    if unbilled is None:
        return ""
    return f" ({NO_TRAFFIC})" if unbilled == NO_TRAFFIC else " (nothing billed)"


def state_text(w: WorkerTile, now: float) -> str:
    text = w.state.value + (f" ({w.detail})" if w.detail else "")
    return text + (f" {span(now - w.since)}" if w.since is not None else "")


def coarse(seconds: float) -> str:
    """A span as precise as a glance needs (`<1m`, `12m`, `1h05m`): it changes once a minute, so a view showing
    it for every worker redraws each tile when its state moves, not every second."""
    s = max(0, int(seconds))
    if s < 60:
        return "<1m"
    if s < 3600:
        return f"{s // 60}m"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def progress_line(snap: Snapshot, precise: bool = True) -> str:
    p = snap.progress
    parts = [f"run {snap.run} ({snap.backend}, {snap.agent}, {snap.status.value})"]
    if snap.gone:
        parts.append("run folder vanished")
    if snap.lead:
        parts.append(f"jobs {p.jobs_done}/{p.jobs_total}" + (f" ({p.jobs_failed} failed)" if p.jobs_failed else ""))
        parts.append(f"findings {p.findings}: {p.confirmed} confirmed, {p.refuted} refuted")
    budget = f" of ${p.budget_usd:.2f}" if p.budget_usd is not None else ""
    parts.append(f"cost {money(p.cost_usd)}{budget}{billing(p.unbilled)}")
    if p.outcome:
        parts.append(f"outcome {p.outcome}")
    elif p.deadline is not None:
        parts.append(f"{(span if precise else coarse)(p.deadline - snap.taken)} left")
    return "; ".join(parts)


def render(snap: Snapshot, width: int = 120) -> list[str]:
    """The whole snapshot as plain text: header, one line per worker, matrix, last commentary and bus lines."""
    lines = [progress_line(snap), ""]
    for w in snap.workers:
        job = f"{w.job} ({w.role})" if w.job else "-"
        model = w.model or w.agent
        bus_line = w.last_bus.split("] ", 1)[-1] if w.last_bus else "-"
        row = f"W{w.n:<3}{model:<20} {state_text(w, snap.taken):<34} {job:<24} {money(w.cost_usd):>9}  {bus_line}"
        lines.append(cut(row, width))
    if snap.matrix:
        lines += ["", "verification matrix:"]
        for m in snap.matrix:
            cells = " ".join(f"W{c.verifier}:{c.verdict}" for c in m.cells) or "-"
            lines.append(cut(f"  {m.finding} (W{m.finder}) {m.status:<11} {cells}  {m.claim}", width))
    if snap.changes:
        lines += ["", "changes:"] + [cut("  " + c, width) for c in snap.changes]
    if snap.commentary:
        lines += ["", "commentary:"] + [cut("  " + c.text, width) for c in snap.commentary[-10:]]
    if snap.bus:
        lines += ["", "bus:"] + [cut(f"  {clock(b.ts)} [{b.sender}] {b.text}", width) for b in snap.bus[-10:]]
    return lines


def changes(before: Snapshot | None, now: Snapshot) -> Iterator[str]:
    """What moved between two snapshots, one timestamped line each: worker states, commentary, bus."""
    stamp = clock(now.taken)
    old = {w.n: w for w in before.workers} if before else {}
    for w in now.workers:
        prev = old.get(w.n)
        if prev is None or (prev.state, prev.detail, prev.job) != (w.state, w.detail, w.job):
            job = f" on {w.job}" if w.job else ""
            yield f"{stamp} W{w.n} {w.state.value}{f' ({w.detail})' if w.detail else ''}{job}"
    seen = {(c.ts, c.text) for c in before.commentary} if before else set()
    for c in now.commentary:
        if (c.ts, c.text) not in seen:
            yield c.text
    seen_bus = {(b.ts, b.sender, b.text) for b in before.bus} if before else set()
    for b in now.bus:
        if (b.ts, b.sender, b.text) not in seen_bus:
            yield f"{clock(b.ts)} bus [{b.sender}] {b.text}"
    if before is None or before.progress.model_dump(exclude={"cost_usd"}) != now.progress.model_dump(
        exclude={"cost_usd"}
    ):
        yield f"{stamp} {progress_line(now)}"

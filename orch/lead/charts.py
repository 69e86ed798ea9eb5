"""A run's jobs as bars over time and each worker's cost over time, as inline SVG (no script, no external
asset): drawn into report.html and into `orch watch --web`'s page, from the controller's books.

Everything in the SVG is escaped: job ids come from the spec, but a chart must not trust its inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

from orch.gateway.records import UsageSnapshot
from orch.lead.jobs import ControllerState
from orch.run.records import Strict

ROW = 22  # px per worker on the timeline
LEFT = 44  # px for the worker labels
ROLE_COLOURS = {"finder": "#3b82f6", "verifier": "#a855f7", "fixer": "#f59e0b", "scribe": "#14b8a6"}
STATUS_OUTLINES = {"failed": "#dc2626", "cancelled": "#9ca3af"}
SERIES_COLOURS = ["#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#dc2626", "#65a30d"]


class JobBar(Strict):
    """One job on the timeline: who ran it and when."""

    worker: int
    job: str
    role: str
    status: str
    start: float
    end: float | None = None
    """None while it runs (drawn up to now)."""


class CostPoint(Strict):
    ts: float
    usd: float


def job_bars(state: ControllerState) -> list[JobBar]:
    return [
        JobBar(worker=j.worker, job=j.id, role=j.role.value, status=j.status.value, start=j.sent_at, end=j.ended_at)
        for j in state.jobs
        if j.worker is not None and j.sent_at is not None
    ]


def job_costs(state: ControllerState, usage: UsageSnapshot | None) -> dict[int, list[CostPoint]]:
    """Each worker's cost over time, a step at each job's end (what its job cost, from the gateway's books)."""
    series: dict[int, list[CostPoint]] = {}
    if usage is None:
        return series
    for book in state.workers:
        counted = usage.workers.get(book.n)
        if counted is None:
            continue
        total = 0.0
        points = [CostPoint(ts=state.started, usd=0.0)]
        for job in sorted((j for j in state.jobs if j.worker == book.n and j.ended_at), key=lambda j: j.ended_at or 0):
            line = counted.by_job.get(job.id)
            total += line.cost_usd if line else 0.0
            points.append(CostPoint(ts=job.ended_at or 0.0, usd=round(total, 6)))
        end = state.finished or usage.updated
        points.append(CostPoint(ts=max(end, points[-1].ts), usd=counted.cost_usd))
        series[book.n] = points
    return series


def _x(ts: float, start: float, end: float, width: float) -> float:
    return LEFT + (ts - start) / max(end - start, 1e-9) * (width - LEFT - 8)


def _clock(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s // 60}:{s % 60:02d}" if s < 3600 else f"{s // 3600}h{s % 3600 // 60:02d}"


def timeline_svg(bars: Sequence[JobBar], workers: int, start: float, end: float, width: int = 800) -> str:
    """Each worker a row, each job a bar from its brief to its end (coloured by role, outlined when it failed)."""
    height = workers * ROW + 24
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="jobs over time">'
    ]
    for n in range(1, workers + 1):
        y = (n - 1) * ROW
        out.append(f'<text x="4" y="{y + 15}" font-size="12" fill="#555">W{n}</text>')
        out.append(f'<line x1="{LEFT}" x2="{width - 8}" y1="{y + ROW}" y2="{y + ROW}" stroke="#eee"/>')
    for bar in bars:
        if not 1 <= bar.worker <= workers:
            continue
        x0 = _x(bar.start, start, end, width)
        x1 = max(_x(bar.end if bar.end is not None else end, start, end, width), x0 + 2)
        y = (bar.worker - 1) * ROW + 3
        fill = ROLE_COLOURS.get(bar.role, "#6b7280")
        stroke = STATUS_OUTLINES.get(bar.status, fill)
        label = escape(f"{bar.job} ({bar.role}, {bar.status})")
        out.append(
            f'<rect class="bar" data-job="{escape(bar.job)}" x="{x0:.1f}" y="{y}" width="{x1 - x0:.1f}" '
            f'height="{ROW - 6}" rx="3" fill="{fill}" stroke="{stroke}" stroke-width="2"><title>{label}</title></rect>'
        )
        if x1 - x0 > 40:
            out.append(
                f'<text x="{x0 + 4:.1f}" y="{y + 12}" font-size="10" fill="#fff" pointer-events="none">'
                f"{escape(bar.job[: int((x1 - x0) / 6)])}</text>"
            )
    axis_y = workers * ROW + 16
    for i in range(5):
        ts = start + (end - start) * i / 4
        anchor = ("start", "middle", "middle", "middle", "end")[i]
        out.append(
            f'<text x="{_x(ts, start, end, width):.1f}" y="{axis_y}" font-size="10" fill="#777" '
            f'text-anchor="{anchor}">{_clock(ts - start)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def cost_svg(series: Mapping[int, Sequence[CostPoint]], start: float, end: float, width: int = 800) -> str:
    """Each worker's cumulative cost (USD) over time, one line each, with a legend."""
    height, top, bottom = 180, 10, 24
    peak = max((p.usd for points in series.values() for p in points), default=0.0) or 1.0
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="costs" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="cost over time per worker">'
    ]
    plot = height - top - bottom

    def y(usd: float) -> float:
        return top + plot - usd / peak * plot

    out.append(f'<text x="4" y="{top + 10}" font-size="10" fill="#777">${peak:.2f}</text>')
    out.append(f'<text x="4" y="{top + plot}" font-size="10" fill="#777">$0</text>')
    out.append(f'<line x1="{LEFT}" x2="{width - 8}" y1="{top + plot}" y2="{top + plot}" stroke="#ccc"/>')
    for i, (n, points) in enumerate(sorted(series.items())):
        colour = SERIES_COLOURS[i % len(SERIES_COLOURS)]
        coords: list[str] = []
        last = 0.0
        for p in sorted(points, key=lambda p: p.ts):  # a step: the cost holds until the next point
            x = _x(p.ts, start, end, width)
            if coords:
                coords.append(f"{x:.1f},{y(last):.1f}")
            coords.append(f"{x:.1f},{y(p.usd):.1f}")
            last = p.usd
        if points:
            coords.append(f"{_x(end, start, end, width):.1f},{y(last):.1f}")
        out.append(
            f'<polyline class="cost" data-worker="{n}" fill="none" stroke="{colour}" stroke-width="2" '
            f'points="{" ".join(coords)}"><title>W{n}: ${last:.4f}</title></polyline>'
        )
        out.append(
            f'<text x="{LEFT + 8 + i * 90}" y="{height - 6}" font-size="11" fill="{colour}">W{n} ${last:.4f}</text>'
        )
    out.append("</svg>")
    return "".join(out)

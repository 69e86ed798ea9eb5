"""A run's jobs as bars over time and each worker's cost over time, as inline SVG (no script, no external
asset): drawn into report.html and into `orch watch --web`'s page, from the controller's books.

Here the geometry; the markup is in orch/data/charts/ (Jinja2, autoescaped): job ids come from the spec, but a
chart must not trust its inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from orch.gateway.modeldir import UsageSnapshot
from orch.jobs.state import ControllerState
from orch.report.templates.environment import render
from orch.run.records import Strict

ROW = 22  # px per worker on the timeline
LEFT = 44  # px for the worker labels
ROLE_COLOURS = {"finder": "#3b82f6", "verifier": "#a855f7", "fixer": "#f59e0b", "scribe": "#14b8a6"}
STATUS_OUTLINES = {"failed": "#dc2626", "cancelled": "#9ca3af"}
TICK_ANCHORS = ("start", "middle", "middle", "middle", "end")
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


class _Bar(NamedTuple):
    job: str
    label: str
    x: str
    y: int
    width: str
    fill: str
    stroke: str
    text_x: str
    short: str
    """The job id shortened to fit in its bar, or "" when the bar is too narrow for text."""


class _Series(NamedTuple):
    worker: int
    colour: str
    points: str
    cost: str
    legend_x: int


def timeline_svg(bars: Sequence[JobBar], workers: int, start: float, end: float, width: int = 800) -> str:
    """Each worker a row, each job a bar from its brief to its end (coloured by role, outlined when it failed)."""
    drawn = []
    for bar in bars:
        if not 1 <= bar.worker <= workers:
            continue
        x0 = _x(bar.start, start, end, width)
        x1 = max(_x(bar.end if bar.end is not None else end, start, end, width), x0 + 2)
        fill = ROLE_COLOURS.get(bar.role, "#6b7280")
        drawn.append(
            _Bar(
                job=bar.job,
                label=f"{bar.job} ({bar.role}, {bar.status})",
                x=f"{x0:.1f}",
                y=(bar.worker - 1) * ROW + 3,
                width=f"{x1 - x0:.1f}",
                fill=fill,
                stroke=STATUS_OUTLINES.get(bar.status, fill),
                text_x=f"{x0 + 4:.1f}",
                short=bar.job[: int((x1 - x0) / 6)] if x1 - x0 > 40 else "",
            )
        )
    ticks = [
        (f"{_x(ts, start, end, width):.1f}", anchor, _clock(ts - start))
        for ts, anchor in zip([start + (end - start) * i / 4 for i in range(5)], TICK_ANCHORS, strict=True)
    ]
    return render(
        "charts/timeline.svg",
        width=width,
        height=workers * ROW + 24,
        rows=[(n, (n - 1) * ROW) for n in range(1, workers + 1)],
        left=LEFT,
        row=ROW,
        bars=drawn,
        ticks=ticks,
        axis_y=workers * ROW + 16,
    )


def cost_svg(series: Mapping[int, Sequence[CostPoint]], start: float, end: float, width: int = 800) -> str:
    """Each worker's cumulative cost (USD) over time, one line each, with a legend."""
    height, top, bottom = 180, 10, 24
    peak = max((p.usd for points in series.values() for p in points), default=0.0) or 1.0
    plot = height - top - bottom

    def y(usd: float) -> float:
        return top + plot - usd / peak * plot

    lines = []
    for i, (n, points) in enumerate(sorted(series.items())):
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
        colour = SERIES_COLOURS[i % len(SERIES_COLOURS)]
        lines.append(_Series(n, colour, " ".join(coords), f"{last:.4f}", LEFT + 8 + i * 90))
    return render(
        "charts/cost.svg", width=width, height=height, top=top, plot=plot, peak=f"{peak:.2f}", left=LEFT, series=lines
    )

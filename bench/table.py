"""Rows, statistics and the printed table (text or Markdown)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["MET", "MISSED", "-", "SKIPPED", "ERROR"]
Compare = Literal["<=", ">=", "=="]


@dataclass
class Target:
    op: Compare
    value: float
    text: str
    """How the target reads in the table, e.g. `<= 1.3x`."""

    def holds(self, measured: float) -> bool:
        if self.op == "<=":
            return measured <= self.value
        if self.op == ">=":
            return measured >= self.value
        return measured == self.value


@dataclass
class Row:
    bench: str
    metric: str
    unit: str
    values: list[float] = field(default_factory=list)
    """One value per repeat (or per sample set); the table shows their median and range."""
    target: Target | None = None
    note: str = ""
    status: Status = "-"

    @property
    def median(self) -> float | None:
        return statistics.median(self.values) if self.values else None

    def judge(self) -> Row:
        med = self.median
        if self.status in ("SKIPPED", "ERROR"):
            return self
        if med is None:
            self.status = "ERROR"
        elif self.target is not None:
            self.status = "MET" if self.target.holds(med) else "MISSED"
        return self

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["median"] = self.median
        data["min"] = min(self.values) if self.values else None
        data["max"] = max(self.values) if self.values else None
        data["n"] = len(self.values)
        data["target"] = asdict(self.target) if self.target else None
        return data


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    ordered = sorted(samples)
    if not ordered:
        raise ValueError("no samples")
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit in ("count", "N", "tokens", "requests"):
        return f"{value:.0f}"
    if unit == "ms" and abs(value) < 10:
        return f"{value:.2f}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _cells(row: Row) -> list[str]:
    med = row.median
    spread = "-"
    if len(row.values) > 1:
        spread = f"{fmt(min(row.values), row.unit)}-{fmt(max(row.values), row.unit)}"
    value = f"{fmt(med, row.unit)} {row.unit}" if med is not None else "-"
    return [
        row.bench,
        row.metric,
        value,
        spread,
        str(len(row.values)),
        row.target.text if row.target else "",
        row.status,
    ]


HEADERS = ["bench", "metric", "median", "range", "n", "target", "status"]


def render_text(rows: Sequence[Row]) -> str:
    table = [HEADERS, *(_cells(r) for r in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADERS))]
    out = []
    for index, line in enumerate(table):
        out.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip())
        if index == 0:
            out.append("  ".join("-" * w for w in widths))
    notes = [f"  [{r.bench}] {r.metric}: {r.note}" for r in rows if r.note]
    if notes:
        out += ["", "notes:", *notes]
    return "\n".join(out)


def render_markdown(rows: Sequence[Row]) -> str:
    out = ["| " + " | ".join(HEADERS) + " |", "|" + "|".join("---" for _ in HEADERS) + "|"]
    for row in rows:
        cells = [c.replace("|", "\\|") for c in _cells(row)]
        if cells[-1] in ("MISSED", "ERROR"):
            cells[-1] = f"**{cells[-1]}**"
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def row_from_json(data: dict[str, Any]) -> Row:
    target = data.get("target")
    return Row(
        bench=data["bench"],
        metric=data["metric"],
        unit=data["unit"],
        values=list(data.get("values") or []),
        target=Target(**target) if target else None,
        note=data.get("note") or "",
        status=data.get("status") or "-",
    )

"""The tables of `--only roles` (bench/roles.py): its rows with their targets, and the attribution tables of
bench/README.md (`python -m bench.roletable RESULTS.json`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from bench import rolemap
from bench.pairs import ratios
from bench.table import Row, Target

WINDOWS = ("up", "turn", "idle")
SHARE = Target("<=", 10.0, "<= 10 %")
FLOOR = Target("<=", 1.15, "<= 1.15x")
LINEAR = Target("<=", 1.10, "<= 1.1x")
MIB = 1 << 20


def rows(tries: list[dict[str, Any]], skipped: dict[int, str], idle_seconds: float) -> list[Row]:
    cores = os.cpu_count() or 1
    out: list[Row] = []
    sizes = sorted({t["workers"] for t in tries})
    per_worker_cost: dict[int, list[float]] = {}
    for n in sizes:
        mine = [t for t in tries if t["workers"] == n]
        up = [t["windows"]["up"] for t in mine]
        turn = [t["windows"]["turn"] for t in mine]
        idle = [t["windows"]["idle"] for t in mine]
        agents_up = [w["cpu"][rolemap.AGENT] for w in up]
        floors = [a / cores for a in agents_up]
        out += [
            Row("roles", f"N={n}: up, wall", "s", [w["seconds"] for w in up]),
            Row("roles", f"N={n}: up, agents' CPU floor (their CPU / {cores} cores)", "s", floors),
            Row("roles", f"N={n}: up wall / floor", "x", _ratios([w["seconds"] for w in up], floors)),
            Row(
                "roles",
                f"N={n}: up, fleet CPU / agents' CPU",
                "x",
                [w["attributed_s"] / a for w, a in zip(up, agents_up, strict=True) if a],
                FLOOR,
                note="what up wall / floor comes to on an idle machine where up is CPU-bound",
            ),
            Row("roles", f"N={n}: up, orch's share of CPU", "%", [w["orch_share"] * 100 for w in up], SHARE),
            Row("roles", f"N={n}: turn, orch's share of CPU", "%", [w["orch_share"] * 100 for w in turn], SHARE),
            Row(
                "roles",
                f"N={n}: orch's CPU per model turn",
                "ms",
                [_orch(w) * 1000 / t["turns"] for w, t in zip(turn, mine, strict=True) if t["turns"]],
            ),
            Row(
                "roles",
                f"N={n}: idle {idle_seconds:g} s, orch's CPU",
                "% core",
                [_orch(w) / w["seconds"] * 100 for w in idle],
            ),
            Row("roles", f"N={n}: attributed / cgroup total (all windows)", "x", [_coverage(t) for t in mine]),
            Row(
                "roles",
                f"N={n}: memory per worker, taken from MemAvailable",
                "MiB",
                [t["memory_per_worker"] / MIB for t in mine if "memory_per_worker" in t],
                note="the fleet's drop in MemAvailable over N (shared pages once); PSS of each agent beside it",
            ),
        ]
        per_worker_cost[n] = [_watching(w) / n for w in idle]
    if len(sizes) > 1:
        base = sizes[1] if len(sizes) > 2 else sizes[0]
        for n in sizes[1:]:
            if n == base:
                continue
            ratios = [a / b for a, b in zip(per_worker_cost[n], per_worker_cost[base], strict=False) if b]
            out.append(
                Row(
                    "roles",
                    f"controller + relay + watchdog per worker, idle: N={n} / N={base}",
                    "x",
                    ratios,
                    LINEAR,
                )
            )
    for n, why in skipped.items():
        out.append(Row("roles", f"N={n}", "", status="SKIPPED", note=why))
    return out


def before_rows(now: list[dict[str, Any]], before: list[dict[str, Any]], rev: str) -> list[Row]:
    """orch's CPU, now against `rev`, each N's runs paired in turn: in `up`, per model turn, idle."""
    out = []
    for n in sorted({t["workers"] for t in before}):
        mine = [t for t in now if t["workers"] == n]
        theirs = [t for t in before if t["workers"] == n]
        for key, what in (("up", "in up"), ("turn", "per model turn"), ("idle", "idle")):

            def cost(t: dict[str, Any], key: str = key) -> float:
                spent = _orch(t["windows"][key])
                return spent / t["turns"] if key == "turn" and t["turns"] else spent

            was, got = [cost(t) for t in theirs], [cost(t) for t in mine]
            out.append(Row("roles", f"N={n}: orch's CPU {what}, at {rev}", "s", was))
            out.append(Row("roles", f"N={n}: orch's CPU {what}, now / {rev}", "x", ratios(got, was)))
        for key in ("up", "turn"):
            shares = [t["windows"][key]["orch_share"] * 100 for t in theirs]
            out.append(Row("roles", f"N={n}: {key}, orch's share at {rev}", "%", shares))
    return out


def _ratios(mine: list[float], theirs: list[float]) -> list[float]:
    return [a / b for a, b in zip(mine, theirs, strict=True) if b]


def _orch(window: dict[str, Any]) -> float:
    return float(sum(window["cpu"][r] for r in rolemap.ORCH))


def _watching(window: dict[str, Any]) -> float:
    return float(sum(window["cpu"][r] for r in (rolemap.CONTROLLER, rolemap.RELAY, rolemap.WATCHDOG)))


def _coverage(got: dict[str, Any]) -> float:
    windows = got["windows"].values()
    cgroup = sum(w["cgroup_s"] for w in windows)
    return sum(w["attributed_s"] for w in windows) / cgroup if cgroup else 1.0


def table(tries: list[dict[str, Any]], window: str, tree: str = "now") -> str:
    """The attribution table of one window (Markdown): CPU seconds by role (rows) and N (columns), the
    median over repeats, then processes started and orch's share; `tree`: now, or the `--before` revision's."""
    tries = [t for t in tries if t.get("tree", "now") == tree]
    sizes = sorted({t["workers"] for t in tries})

    def median(values: list[float]) -> float:
        values = sorted(values)
        return values[len(values) // 2] if values else 0.0

    head = "| role | " + " | ".join(f"N={n}" for n in sizes) + " |"
    lines = [head, "|---|" + "---|" * len(sizes)]
    for name in rolemap.ROLES:
        cells = []
        for n in sizes:
            mine = [t["windows"][window] for t in tries if t["workers"] == n]
            cpu = median([w["cpu"][name] for w in mine])
            count = median([w["processes"][name] for w in mine])
            cells.append(f"{cpu:.2f} s ({count:.0f})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    share = [median([t["windows"][window]["orch_share"] * 100 for t in tries if t["workers"] == n]) for n in sizes]
    lines.append("| **orch's share** | " + " | ".join(f"**{s:.1f} %**" for s in share) + " |")
    return "\n".join(lines)


if __name__ == "__main__":  # `python -m bench.roletable RESULTS.json`: the attribution tables for bench/README.md
    import sys

    data = json.loads(Path(sys.argv[1]).read_text())
    raw = data["benches"]["roles"]["raw"]
    for tree in ("now", "before") if raw.get("before") else ("now",):
        for key in WINDOWS:
            title = key if tree == "now" else f"{key}, at {raw['before']}"
            print(f"\n### {title}\n\n{table(raw['tries'], key, tree)}")

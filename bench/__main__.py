"""`python -m bench [--quick] [--repeat K] [--json OUT] [--only NAMES]`: measure orch, print a table.

Benchmarks measure; they never fail a build: the exit code is 0 whatever the figures, 2 only when the
harness itself breaks (after writing what it had).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import (
    agents,
    busload,
    caps,
    changes,
    container,
    gate,
    gateway,
    images,
    isolation,
    memory,
    notice,
    notify,
    overhead,
    procs,
    reports,
    roles,
    starts,
    swarm,
    up,
    view,
    watch,
)
from bench.core import Config, Context, Result
from bench.env import REPO, BenchEnv, BenchError
from bench.table import Row, render_markdown, render_text, row_from_json
from orch.errors import OrchError

DEFAULT_JSON = REPO / "bench" / "results" / "latest.json"
BENCHES: dict[str, tuple[Callable[[Context], Result], bool]] = {
    # name: (run, needs the real Claude Code + tmux)
    "bus": (busload.run, False),
    "notice": (notice.run, False),
    "up": (up.run, True),
    "overhead": (overhead.run, True),
    "watch": (watch.run, True),
    "memory": (memory.run, False),  # from what up/overhead/watch saw
    "container": (container.run, False),
    "gateway": (gateway.run, False),  # the model gateway against the scripted model server
    "view": (view.run, False),  # `orch watch` (terminal and web) on a busy run folder
    "isolation": (isolation.run, True),  # local strict (bubblewrap) against local shared, side by side
    "agents": (agents.run, False),  # each agent CLI offline, side by side (skips one not installed)
    "images": (images.run, False),  # what each agent adds to the worker image (builds orch-bench:AGENT)
    "reports": (reports.run, False),  # report.sarif + report.junit.xml of 1,000 findings, beside report.json
    "changes": (changes.run, False),  # issue 22: worktrees, the checks' sandbox, the integration queue
    "caps": (caps.run, True),  # the per-worker caps: limits on against off, and the watchdog's cost
    "gate": (gate.run, False),  # issue 22: the gate's overhead over an ungated run of the same writers
    "starts": (starts.run, False),  # an `orch bus post` process, a run gateway's start (--before REV: side by side)
    "roles": (roles.run, True),  # issue 35: a fleet's CPU by process and role, N = 1 to 64 (the kernel's accounting)
    "notify": (notify.run, False),  # issue 34: a hook or a controller event -> the webhook posted, the terminal rung
    "swarm": (swarm.run, False),  # issue 33, on scripts/swarm-cluster.sh's swarm (root): starts, spread, the sync
}
MEASUREMENT_ERRORS = (OrchError, BenchError, OSError, TimeoutError)


def parse_size(text: str) -> int:
    """`24G`, `512M`, `1.5GiB`, or bytes."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    clean = text.strip().lower().removesuffix("ib").removesuffix("b")
    if clean and clean[-1] in units:
        return int(float(clean[:-1]) * units[clean[-1]])
    return int(float(clean))


def _names(text: str | None) -> list[str]:
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        raise SystemExit(f"unknown benchmark(s): {', '.join(unknown)} (choose from {', '.join(BENCHES)})")
    return names


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small N, few samples: a smoke run of a few minutes")
    parser.add_argument("--repeat", type=int, help="repeats per measurement (default 3, quick 1)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"write results here (default {DEFAULT_JSON})")
    parser.add_argument("--only", help=f"comma list of benchmarks to run: {','.join(BENCHES)}")
    parser.add_argument("--skip", help="comma list of benchmarks not to run")
    parser.add_argument("--memory-budget", help="memory budget for the 'largest N' figure (default: MemAvailable)")
    parser.add_argument("--profile", action="store_true", help="cProfile one `up` of the largest N (into the JSON)")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--from-json", type=Path, help="only print the table of an earlier results file")
    parser.add_argument("--keep", action="store_true", help="keep the private ORCH_HOME (run folders) afterwards")
    parser.add_argument("--before", metavar="REV", help="starts: also measure orch at this git revision, in turn")
    parser.add_argument(
        "--roles-workers", metavar="N,N,...", help="roles: the fleet sizes (default 1,4,16,32,64; quick 1,2)"
    )
    args = parser.parse_args(argv)
    if args.repeat is not None and not 1 <= args.repeat <= 100:
        parser.error("--repeat must be 1 to 100")
    if args.roles_workers is not None:
        try:
            args.roles_workers = tuple(int(n) for n in args.roles_workers.split(","))
        except ValueError:
            parser.error("--roles-workers takes fleet sizes: 1,4,16")
        if not all(1 <= n <= 64 for n in args.roles_workers):
            parser.error("--roles-workers: each size 1 to 64 (a run's most workers)")
    return args


def _print_rows(rows: list[Row], markdown: bool) -> None:
    print(render_markdown(rows) if markdown else render_text(rows), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.from_json:
        data = json.loads(args.from_json.read_text())
        _print_rows([row_from_json(r) for r in data["rows"]], args.markdown)
        return 0
    only, skip = _names(args.only), _names(args.skip)
    chosen = [n for n in BENCHES if (not only or n in only) and n not in skip]
    available = procs.available_memory()
    budget = parse_size(args.memory_budget) if args.memory_budget else available
    config = Config.make(args.quick, args.repeat, budget, args.profile)
    config.before = args.before
    if args.roles_workers is not None:
        config.roles_workers = args.roles_workers
    started, t0 = dt.datetime.now(dt.UTC), time.monotonic()
    machine_at_start = procs.machine()
    results: dict[str, dict[str, Any]] = {}
    rows: list[Row] = []
    broken: BaseException | None = None
    with BenchEnv(keep=args.keep) as env:
        ctx = Context(config=config, env=env)
        missing = env.claude_missing()
        for name in chosen:
            run, needs_claude = BENCHES[name]
            print(f"bench: {name} ...", file=sys.stderr, flush=True)
            b0 = time.monotonic()
            entry: dict[str, Any] = {"status": "ok"}
            try:
                if needs_claude and missing:
                    result = Result(skipped=f"real Claude Code workers unavailable: {missing}")
                else:
                    result = run(ctx)
            except MEASUREMENT_ERRORS as exc:
                result = Result(rows=[Row(name, "benchmark failed", "", status="ERROR", note=_one_line(exc))])
                entry = {"status": "error", "error": _one_line(exc), "traceback": traceback.format_exc()}
            except Exception as exc:  # the harness itself is broken: keep what we have, then fail
                broken = exc
                entry = {"status": "harness-error", "error": _one_line(exc), "traceback": traceback.format_exc()}
                result = Result(rows=[Row(name, "harness failed", "", status="ERROR", note=_one_line(exc))])
            if result.skipped:
                entry = {"status": "skipped", "reason": result.skipped}
                result.rows = result.rows or [Row(name, "skipped", "", status="SKIPPED", note=result.skipped)]
            for row in result.rows:
                rows.append(row.judge())
            entry["duration_s"] = round(time.monotonic() - b0, 2)
            entry["raw"] = result.raw
            results[name] = entry
            print(f"bench: {name} {entry['status']} in {entry['duration_s']:.1f}s", file=sys.stderr, flush=True)
            if broken is not None:
                break
    duration = time.monotonic() - t0
    skipped = {n: e["reason"] for n, e in results.items() if e["status"] == "skipped"}
    machine = {**machine_at_start, "loadavg_at_end": list(os.getloadavg()), "memory_budget_bytes": budget}
    document: dict[str, Any] = {
        "schema": 1,
        "command": "python -m bench " + shlex.join(sys.argv[1:] if argv is None else argv),
        "started": started.isoformat(timespec="seconds"),
        "duration_s": round(duration, 1),
        "quick": config.quick,
        "repeat": config.repeat,
        "config": {k: v for k, v in vars(config).items()},
        "machine": machine,
        "rows": [r.as_json() for r in rows],
        "benches": results,
        "skipped": skipped,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.json.with_name(f".{args.json.name}.{os.getpid()}")
    tmp.write_text(json.dumps(document, indent=2, default=str) + "\n")
    tmp.replace(args.json)
    print()
    _print_rows(rows, args.markdown)
    print(f"\n{len(chosen)} benchmark(s) in {duration:.0f}s; results in {args.json}")
    for name, reason in skipped.items():
        print(f"skipped {name}: {reason}")
    if broken is not None:
        print(f"bench: the harness broke: {_one_line(broken)}", file=sys.stderr)
        return 2
    return 0


def _one_line(exc: BaseException) -> str:
    text = exc.one_line() if isinstance(exc, OrchError) else str(exc)
    return f"{type(exc).__name__}: {' '.join(text.split())[:300]}"


if __name__ == "__main__":
    sys.exit(main())

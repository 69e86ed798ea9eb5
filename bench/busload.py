"""Bus under load: W concurrent writer processes x P posts each; lines lost or torn, posts per second."""

from __future__ import annotations

import json
import subprocess
import time

from bench.core import Context, Result
from bench.env import BenchError, Lines, helper, orch_cli, popen, python_env, send, stop
from bench.probes import payload
from bench.table import Row, Target, percentile
from orch.run import bus
from orch.run.folder import RunFolder
from orch.run.listeners import BusServer

CLI_TIMEOUT = 60.0


def check(run: RunFolder, writers: int, posts: int) -> dict[str, int]:
    """Compare bus.md with what every writer posted: lost, torn, duplicated, out of order."""
    seen: dict[tuple[int, int], int] = {}
    torn = 0
    last_seq = dict.fromkeys(range(1, writers + 1), -1)
    reordered = 0
    raw_lines = bus.read_lines(run)
    for raw in raw_lines:
        line = bus.parse_line(raw)
        parts = line.text.split(" ", 2) if line else []
        try:
            writer_id, seq = int(parts[0][1:]), int(parts[1])
        except (IndexError, ValueError):
            torn += 1
            continue
        if line is None or line.sender != f"W{writer_id}" or line.text != payload(writer_id, seq):
            torn += 1
            continue
        seen[(writer_id, seq)] = seen.get((writer_id, seq), 0) + 1
        if seq < last_seq.get(writer_id, -1):
            reordered += 1
        last_seq[writer_id] = max(seq, last_seq.get(writer_id, -1))
    expected = {(w, s) for w in range(1, writers + 1) for s in range(posts)}
    return {
        "lines": len(raw_lines),
        "lost": len(expected - seen.keys()),
        "torn": torn,
        "duplicated": sum(c - 1 for c in seen.values()),
        "reordered": reordered,
    }


def once(ctx: Context, writers: int, posts: int, through: str = "file") -> dict[str, float]:
    """One load: `through` the lock on bus.md (shared isolation) or the controller's socket (strict)."""
    run = ctx.env.file_run("bus", workers=writers)
    server = BusServer(run).start() if through == "socket" else None
    procs = [popen(helper("buswriter", run.name, str(w), str(posts), through)) for w in range(1, writers + 1)]
    try:
        # Each writer builds its texts, then blocks on stdin: "go" releases them all at once.
        for proc in procs:
            send(proc, "go")
        reports = [json.loads(Lines(p, f"bus writer {i}").next(300.0)) for i, p in enumerate(procs, 1)]
    finally:
        for proc in procs:
            stop(proc)
        if server is not None:
            server.stop()
    wall = (max(r["last_ns"] for r in reports) - min(r["first_ns"] for r in reports)) / 1e9
    latencies = [ms for r in reports for ms in r["latency_ms"]]
    result: dict[str, float] = {**check(run, writers, posts), "wall_s": wall}
    result["p50_ms"], result["p99_ms"] = percentile(latencies, 50), percentile(latencies, 99)
    result["posts_per_s"] = writers * posts / wall if wall > 0 else 0.0
    return result


def cli_post_ms(ctx: Context, samples: int) -> list[float]:
    """Wall time of one `orch bus post` command (what a worker runs): interpreter start included."""
    run = ctx.env.file_run("buscli")
    out = []
    for i in range(samples):
        start = time.monotonic()
        argv = orch_cli("bus", "post", run.name, "--as", "1", f"cli sample {i}")
        done = subprocess.run(argv, capture_output=True, env=python_env(), check=False, timeout=CLI_TIMEOUT)
        if done.returncode != 0:
            raise BenchError(f"orch bus post failed: {done.stderr.decode(errors='replace').strip()[-300:]}")
        out.append((time.monotonic() - start) * 1000)
    return out


def run(ctx: Context) -> Result:
    cfg = ctx.config
    w, p = cfg.bus_writers, cfg.bus_posts
    label = f"{w} writers x {p} posts"
    tries = [once(ctx, w, p) for _ in range(cfg.repeat)]
    stamped = [once(ctx, w, p, "socket") for _ in range(cfg.repeat)]
    cli = cli_post_ms(ctx, cfg.cli_samples)

    def values(key: str, of: list[dict[str, float]] = tries) -> list[float]:
        return [float(t[key]) for t in of]

    zero = Target("==", 0, "0")
    rows = [
        Row("bus", f"lines lost ({label})", "count", values("lost"), zero),
        Row("bus", f"lines torn ({label})", "count", values("torn"), zero),
        Row(
            "bus", "lines duplicated or out of order", "count", [t["duplicated"] + t["reordered"] for t in tries], zero
        ),
        Row("bus", f"throughput ({label})", "posts/s", values("posts_per_s"), note="bus.post in-process, flock"),
        Row("bus", "`orch bus post` command, wall", "ms", cli, note="a process per post: interpreter start dominates"),
        Row("bus", f"stamped by the controller: lines lost or torn ({label})", "count",
            [t["lost"] + t["torn"] + t["duplicated"] + t["reordered"] for t in stamped], zero),
        Row("bus", "stamped by the controller: post latency p50", "ms", values("p50_ms", stamped),
            note="strict isolation: bus.sock, sender from SO_PEERCRED"),
        Row("bus", "stamped by the controller: post latency p99", "ms", values("p99_ms", stamped),
            Target("<=", 20, "<= 20 ms")),
        Row("bus", f"stamped by the controller: throughput ({label})", "posts/s", values("posts_per_s", stamped)),
    ]  # fmt: skip
    return Result(rows=rows, raw={"tries": tries, "stamped": stamped, "cli_post_ms": cli})

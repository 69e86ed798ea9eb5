"""Notice latency: from a done flag (or a bus line) being written by one process to another noticing it.

Every sample: the watcher is started and armed first (its inotify watch is visible in /proc/PID/fdinfo),
then a writer process takes a monotonic timestamp and writes; the watcher (or the benchmark, reading the
watcher's pipe) takes another when it has noticed. Nothing here sleeps: each step waits for the last.
"""

from __future__ import annotations

import time

from bench.core import Context, Result
from bench.env import BenchError, Lines, helper, orch_cli, popen, send, stop, wait_exit, wait_watching
from bench.table import Row, Target, percentile

LINE_TIMEOUT = 30.0
TARGET = Target("<=", 100.0, "p99 <= 100 ms")


def done_flag_ms(ctx: Context, samples: int) -> list[float]:
    """`orch.fleet.control.wait` in a long-lived process (as a controller calls it) noticing a done flag."""
    run = ctx.env.file_run("notice")
    inode = run.done(1).parent.stat().st_ino  # the flag's folder: its outbox
    waiter, writer = popen(helper("waiter", run.name)), popen(helper("writer"))
    waits, writes = Lines(waiter, "waiter"), Lines(writer, "writer")
    out = []
    try:
        for _ in range(samples):
            send(waiter, "wait 1")
            wait_watching(waiter.pid, inode)
            send(writer, f"flag {run.done(1)}")
            written = int(writes.next(LINE_TIMEOUT))
            noticed = waits.next(LINE_TIMEOUT)
            if not noticed.isdigit():
                raise BenchError(f"the waiter did not notice the flag: {noticed}")
            out.append((int(noticed) - written) / 1e6)
            run.done(1).unlink()
    finally:
        stop(waiter)
        stop(writer)
    return out


def wait_cli_ms(ctx: Context, samples: int) -> tuple[list[float], list[float]]:
    """`orch wait NAME` (the command a lead runs): from the flag written to "all done" printed, and to
    the command having exited (what `orch wait && next-step` waits for)."""
    run = ctx.env.file_run("noticecli")
    inode = run.done(1).parent.stat().st_ino  # the flag's folder: its outbox
    writer = popen(helper("writer"))
    writes = Lines(writer, "writer")
    printed, exited = [], []
    try:
        for _ in range(samples):
            proc = popen(orch_cli("wait", run.name, "--only", "1", "--timeout", "60"), stdin=False)
            try:
                wait_watching(proc.pid, inode)
                send(writer, f"flag {run.done(1)}")
                written = int(writes.next(LINE_TIMEOUT))
                line = Lines(proc, "orch wait").next(LINE_TIMEOUT)
                t_print = time.monotonic_ns()
                code = wait_exit(proc, LINE_TIMEOUT)
                t_exit = time.monotonic_ns()
            finally:
                stop(proc)
            if code != 0 or "all done" not in line:
                raise BenchError(f"orch wait exited {code} after printing {line!r}")
            printed.append((t_print - written) / 1e6)
            exited.append((t_exit - written) / 1e6)
            run.done(1).unlink()
    finally:
        stop(writer)
    return printed, exited


def bus_follow_ms(ctx: Context, samples: int) -> list[float]:
    """`orch bus tail -f` (bus.follow, inotify) printing a line another process just posted."""
    run = ctx.env.file_run("noticebus")
    follower = popen(orch_cli("bus", "tail", run.name, "--follow", "--lines", "0"), stdin=False)
    writer = popen(helper("writer"))
    follows, writes = Lines(follower, "bus follower"), Lines(writer, "writer")
    out = []
    try:
        wait_watching(follower.pid, run.bus.stat().st_ino)
        for seq in range(samples):
            send(writer, f"bus {run.name} {seq}")
            written = int(writes.next(LINE_TIMEOUT))
            line = follows.next(LINE_TIMEOUT)
            noticed = time.monotonic_ns()
            if not line.endswith(f"[W1] sample {seq}"):
                raise BenchError(f"the follower printed {line!r} for sample {seq}")
            out.append((noticed - written) / 1e6)
    finally:
        stop(follower)
        stop(writer)
    return out


def _rows(metric: str, tries: list[list[float]], target: Target | None, note: str) -> list[Row]:
    return [
        Row("notice", f"{metric}, p50", "ms", [percentile(t, 50) for t in tries], note=""),
        Row("notice", f"{metric}, p99", "ms", [percentile(t, 99) for t in tries], target, note=note),
    ]


def run(ctx: Context) -> Result:
    cfg = ctx.config
    flags = [done_flag_ms(ctx, cfg.notice_samples) for _ in range(cfg.repeat)]
    lines = [bus_follow_ms(ctx, cfg.notice_samples) for _ in range(cfg.repeat)]
    cli = [wait_cli_ms(ctx, cfg.cli_samples) for _ in range(cfg.repeat)]
    printed, exited = [c[0] for c in cli], [c[1] for c in cli]
    n, m = cfg.notice_samples, cfg.cli_samples
    rows = [
        *_rows("done flag -> fleet.wait", flags, TARGET, f"{n} samples per repeat"),
        *_rows("bus line -> `orch bus tail -f`", lines, TARGET, f"{n} samples per repeat"),
        *_rows("done flag -> `orch wait` printed", printed, TARGET, f"{m} samples per repeat"),
        *_rows("done flag -> `orch wait` exited", exited, None, "includes the interpreter's exit"),
    ]
    raw = {"done_flag_ms": flags, "bus_follow_ms": lines, "wait_cli_printed_ms": printed, "wait_cli_exited_ms": exited}
    return Result(rows=rows, raw=raw)

"""What `orch watch` costs on a busy fleet, and how soon a hook event shows.

The fleet is a run folder whose 16 workers are kept busy by a writer thread: each worker's hook log gets
a tool call about once a second (as a working Claude Code's does) and the bus a line every two seconds.
No agents run: the view reads files, so files are what make it work. Figures:
- CPU of the terminal view (`orch watch NAME` in a real terminal: a tmux pane, 160x48) over the window;
- CPU of `orch watch NAME --web` with 5 pages open (SSE clients reading every update) over the window;
- hook event -> the worker's tile (the Textual app in this process, its pilot: the widget updated);
- hook event -> an open page's stream (the SSE message that carries it).
The probes' events go to one more worker that the writer leaves alone (its next write would hide them).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp

from bench import procs
from bench.core import Context, Result
from bench.env import BenchError, Lines, orch_cli, popen, stop
from bench.table import Row, Target, percentile
from orch.run import bus
from orch.run.files import append_line
from orch.run.folder import RunFolder
from orch.run.records import RunStatus
from orch.sse import SseParser
from orch.waits import wait_until

PAGES = 5
TARGET_CPU = Target("<=", 3.0, "<= 3 %")
TARGET_P99 = Target("<=", 250.0, "p99 <= 250 ms")


def _event(name: str, tool: str | None = None) -> str:
    return json.dumps({"ts": time.time(), "hook_event_name": name, "tool_name": tool})


@contextlib.contextmanager
def busy(run: RunFolder, workers: int) -> Iterator[None]:
    """Keep the workers busy (a tool call each about once a second, a bus line every two seconds)."""
    stop_now = threading.Event()

    def write() -> None:
        step = 0
        while not stop_now.wait(1.0 / workers):
            n = step % workers + 1
            append_line(run.state(n), _event("PreToolUse" if step % 2 else "PostToolUse", "Bash"))
            if step % (2 * workers) == 0:
                bus.post(run, n, f"working on step {step}")
            step += 1

    for n in range(1, workers + 1):
        append_line(run.state(n), _event("SessionStart"))
    thread = threading.Thread(target=write, name="bench-busy", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop_now.set()
        thread.join()


def _running(ctx: Context, workers: int) -> RunFolder:
    run = ctx.env.file_run("view", workers)
    info = run.info()
    info.status = RunStatus.RUNNING
    run.write_info(info)
    return run


def tui_cpu(ctx: Context, run: RunFolder, seconds: float) -> float:
    """% of a core used by `orch watch NAME` drawing in a real terminal (a private tmux server)."""
    sock_dir = Path(tempfile.mkdtemp(prefix="bv-", dir="/tmp"))
    tmux = ["tmux", "-S", str(sock_dir / "s")]
    cmd = " ".join(orch_cli("watch", run.name))
    try:
        subprocess.run([*tmux, "new-session", "-d", "-x", "160", "-y", "48", cmd], check=True)
        pid = int(subprocess.run([*tmux, "display", "-p", "#{pane_pid}"], capture_output=True, text=True,
                                 check=True).stdout)  # fmt: skip

        def drawn() -> bool:
            screen = subprocess.run([*tmux, "capture-pane", "-p"], capture_output=True, text=True, check=False)
            return f"run {run.name} (" in screen.stdout and "W1 " in screen.stdout

        wait_until(drawn, 60, "the view to draw")
        c0, t0 = procs.tree_cpu(pid), time.monotonic()
        time.sleep(seconds)
        return 100 * (procs.tree_cpu(pid) - c0) / (time.monotonic() - t0)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, check=False)
        shutil.rmtree(sock_dir, ignore_errors=True)


async def _pages(url: str, pages: int, seconds: float, pid: int) -> float:
    base, _, query = url.partition("/?")
    token = query.split("&")[0].removeprefix("t=")
    run = query.split("run=")[1]
    stream = f"{base}/api/events?t={token}&run={run}"
    received = [0] * pages

    async def page(i: int, http: aiohttp.ClientSession) -> None:
        parser = SseParser()
        async with http.get(stream, timeout=aiohttp.ClientTimeout(total=None)) as res:
            async for chunk in res.content.iter_any():
                received[i] += len(parser.feed(chunk))

    async with aiohttp.ClientSession() as http:
        tasks = [asyncio.create_task(page(i, http)) for i in range(pages)]
        await asyncio.sleep(2.0)  # the pages have connected and drawn once
        c0, t0 = procs.tree_cpu(pid), time.monotonic()
        await asyncio.sleep(seconds)
        pct = 100 * (procs.tree_cpu(pid) - c0) / (time.monotonic() - t0)
        for task in tasks:
            task.cancel()
        if min(received) == 0:
            raise BenchError("a page received no update")
        return pct


async def _web_latency(url: str, run: RunFolder, samples: int) -> list[float]:
    base, _, query = url.partition("/?")
    token = query.split("&")[0].removeprefix("t=")
    stream = f"{base}/api/events?t={token}&run={run.name}"
    workers = run.info().workers
    out: list[float] = []
    async with aiohttp.ClientSession() as http, http.get(stream, timeout=aiohttp.ClientTimeout(total=None)) as res:
        await res.content.readline()  # the first snapshot
        for i in range(samples):
            probe = f"probe{i}x"
            t0 = time.perf_counter()
            append_line(run.state(workers), _event("PreToolUse", probe))
            async with asyncio.timeout(10):
                while True:
                    line = await res.content.readline()
                    if probe.encode() in line:
                        break
            out.append(1000 * (time.perf_counter() - t0))
            await asyncio.sleep(random.uniform(0.05, 0.15))
    return out


async def _tui_latency(run: RunFolder, samples: int) -> list[float]:
    from orch.view.tui import FleetScreen, WatchApp

    app = WatchApp(run)
    out: list[float] = []
    workers = run.info().workers
    async with app.run_test(size=(160, 48)) as pilot:
        async with asyncio.timeout(30):
            while not isinstance(app.screen, FleetScreen):
                await pilot.pause(0.01)
        screen = app.screen
        for i in range(samples):
            probe = f"probe{i}x"
            n = workers
            t0 = time.perf_counter()
            append_line(run.state(n), _event("PreToolUse", probe))
            async with asyncio.timeout(10):
                while probe not in screen.tiles[n].plain:
                    await asyncio.sleep(0.002)
            out.append(1000 * (time.perf_counter() - t0))
            await asyncio.sleep(random.uniform(0.05, 0.15))
    return out


def run(ctx: Context) -> Result:
    if shutil.which("tmux") is None:
        return Result(skipped="tmux is missing")
    cfg = ctx.config
    rows: list[Row] = []
    raw: dict[str, object] = {}
    for workers in cfg.view_workers:
        got, raw[str(workers)] = _measure(ctx, max(workers, 2))
        rows += got
    return Result(rows=rows, raw=raw)


def _measure(ctx: Context, workers: int) -> tuple[list[Row], dict[str, list[float]]]:
    cfg = ctx.config
    seconds = cfg.watch_seconds
    samples = 30 if cfg.quick else 200
    tui, web, tui_ms, web_ms = [], [], [], []
    for _ in range(cfg.repeat):
        run_ = _running(ctx, workers + 1)  # the last worker is the probes': the busy writer leaves it alone
        with busy(run_, workers):
            tui.append(tui_cpu(ctx, run_, seconds))
            server = popen(orch_cli("watch", run_.name, "--web"), stdin=False)
            try:
                url = Lines(server, "orch watch --web").next(30)
                web.append(asyncio.run(_pages(url, PAGES, seconds, server.pid)))
                web_ms += asyncio.run(_web_latency(url, run_, samples))
            finally:
                stop(server)
            tui_ms += asyncio.run(_tui_latency(run_, samples))
    label = f"{workers} busy workers, {seconds:g} s"
    rows = [
        Row("view", f"`orch watch` TUI CPU ({label})", "% core", tui, TARGET_CPU, note="in a 160x48 tmux pane"),
        Row("view", f"`orch watch --web` CPU, {PAGES} pages ({label})", "% core", web, TARGET_CPU),
        Row("view", f"hook event -> TUI tile, p50 ({workers})", "ms", [percentile(tui_ms, 50)]),
        Row("view", f"hook event -> TUI tile, p99 ({workers})", "ms", [percentile(tui_ms, 99)], TARGET_P99,
            note=f"{len(tui_ms)} events, Textual's pilot in this process"),
        Row("view", f"hook event -> web page, p50 ({workers})", "ms", [percentile(web_ms, 50)]),
        Row("view", f"hook event -> web page, p99 ({workers})", "ms", [percentile(web_ms, 99)], TARGET_P99,
            note=f"{len(web_ms)} events, read from an open page's SSE stream"),
    ]  # fmt: skip
    return rows, {"tui_cpu": tui, "web_cpu": web, "tui_ms": tui_ms, "web_ms": web_ms}

"""Needs you: from a moment a person must act on to the notification delivered, against Claude Code's own notice.

A run folder (no fleet), and orch's notifier following it as `orch run` hosts it (orch.notify.follow, a thread of
this process) with two channels: a JSON webhook to a loopback receiver (aiohttp, a thread here) and the terminal,
written to a pty whose other end a thread here reads, as a terminal emulator would. Each sample is one moment:
- a hook: the real hook program (orch/run/hookwriter.py, a process of its own, as an agent runs it) appends a
  permission prompt that no policy answers; timed from the time it stamps on the line;
- a controller event: a worker out of restarts, appended to events.jsonl as the controller logs it.
Each is timed to the POST's arrival at the receiver and to the OSC 9 sequence's arrival at the pty. The
notifier's throttle is set out of the way (a run hears three prompts at once, then one a minute); it decides in
microseconds, so the path measured is the rest. Claude Code's own notice of a waiting prompt comes ~6 s after
its dialog, of an idle session 60 s or more (docs/notify.md); the target is a p99 under 1 s.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from aiohttp import web

from bench.core import Context, Result
from bench.env import BenchError
from bench.table import Row, Target, percentile
from orch.notify import send
from orch.notify.config import NotifyConfig, Webhook
from orch.notify.follow import Notifier
from orch.notify.throttle import Throttle
from orch.run import hookwriter
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent
from orch.waits import wait_until

TARGET = Target("<=", 1000.0, "p99 <= 1 s")
SAMPLE_TIMEOUT = 10.0
OSC9 = re.compile(rb"\x1b\]9;[^\x07]*sample (\d+)")


class Arrivals:
    """When each sample's text arrived, by sample number (filled from the receiver's and the pty's threads)."""

    def __init__(self) -> None:
        self.at: dict[int, float] = {}
        self._lock = threading.Lock()

    def seen(self, sample: int) -> None:
        with self._lock:
            self.at.setdefault(sample, time.time())

    def wait(self, sample: int) -> float:
        wait_until(lambda: sample in self.at, SAMPLE_TIMEOUT, f"sample {sample} to arrive", interval=0.001)
        return self.at[sample]


@contextmanager
def receiver(arrivals: Arrivals) -> Iterator[str]:
    """A webhook receiver on loopback: its URL."""
    loop = asyncio.new_event_loop()
    ready, stop = threading.Event(), asyncio.Event()
    url: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        found = re.search(r"sample (\d+)", json.loads(await request.read())["text"])
        if found:
            arrivals.seen(int(found.group(1)))
        return web.Response(text="ok")

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/hook", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url.append(f"http://127.0.0.1:{runner.addresses[0][1]}/hook")
        ready.set()
        await stop.wait()
        await runner.cleanup()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    if not ready.wait(10):
        raise BenchError("the webhook receiver did not start")
    try:
        yield url[0]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)


@contextmanager
def terminal(arrivals: Arrivals) -> Iterator[Callable[[str], None]]:
    """A pty: what the notifier writes to its end, read from the other as a terminal emulator reads it."""
    master, slave = os.openpty()

    def read() -> None:
        seen = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            seen += chunk
            for found in OSC9.finditer(seen):
                arrivals.seen(int(found.group(1)))
            seen = seen[-4096:]

    def write(text: str) -> None:
        os.write(slave, text.encode())

    threading.Thread(target=read, daemon=True).start()
    try:
        yield write
    finally:
        os.close(slave)
        os.close(master)


def fire_hook(run: RunFolder, sample: int) -> float:
    """The real hook program appends a prompt no policy answers; the time it stamped on the line."""
    payload = {
        "hook_event_name": "PermissionRequest",
        "tool_name": "Bash",
        "tool_input": {"command": f"sample {sample}"},
    }
    argv = [sys.executable, "-S", str(Path(hookwriter.__file__).resolve()), "event", str(run.state(1))]
    subprocess.run(argv, input=json.dumps(payload).encode(), check=True)
    return run.hook_events(1)[-1].ts


def fire_event(run: RunFolder, sample: int) -> float:
    event = ControllerEvent(event=Event.WORKER_OUT, worker=1, data={"reason": f"sample {sample}"})
    run.log_event(event)
    return event.ts.timestamp()


def measure(ctx: Context, samples: int) -> dict[str, list[float]]:
    run = ctx.env.file_run("notify")
    posts, rings = Arrivals(), Arrivals()
    out: dict[str, list[float]] = {"hook_webhook_ms": [], "hook_terminal_ms": [], "event_webhook_ms": []}
    with receiver(posts) as url, terminal(rings) as write:
        config = NotifyConfig(webhooks=[Webhook(url=url)])
        notifier = Notifier(run, config, send.channels(config, {}, write=write))
        notifier.throttle = Throttle(burst=1e9, refill=1e-9)
        notifier.start()
        try:
            for sample in range(samples):
                fired = fire_hook(run, sample)
                out["hook_webhook_ms"].append((posts.wait(sample) - fired) * 1000)
                out["hook_terminal_ms"].append((rings.wait(sample) - fired) * 1000)
                answered = {"hook_event_name": "PostToolUse", "tool_name": "Bash"}  # so the next prompt is a new wait
                hookwriter.append_event(str(run.state(1)), answered)
            for sample in range(samples, 2 * samples):
                fired = fire_event(run, sample)
                out["event_webhook_ms"].append((posts.wait(sample) - fired) * 1000)
        finally:
            notifier.close()
    return out


def run(ctx: Context) -> Result:
    cfg = ctx.config
    tries = [measure(ctx, cfg.notice_samples // 5) for _ in range(cfg.repeat)]
    n = cfg.notice_samples // 5
    note = f"{n} samples per repeat; Claude Code's own notice: ~6 s (a prompt), 60 s (idle)"
    rows = []
    for key, metric in (
        ("hook_webhook_ms", "hook -> webhook posted"),
        ("hook_terminal_ms", "hook -> terminal OSC 9"),
        ("event_webhook_ms", "controller event -> webhook posted"),
    ):
        rows.append(Row("notify", f"{metric}, p50", "ms", [percentile(t[key], 50) for t in tries]))
        rows.append(Row("notify", f"{metric}, p99", "ms", [percentile(t[key], 99) for t in tries], TARGET, note=note))
    return Result(rows=rows, raw={key: [t[key] for t in tries] for key in tries[0]})

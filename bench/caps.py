"""The cost of the per-worker caps (orch.fleet.caps): limits on against limits off, side by side.

Local runs with real Claude Code workers on the scripted model: `orch up` to ready and a brief to the last
done flag, with the default caps and with every cap `off`, interleaved so both see the same machine; then
the controller's watchdog on the live fleet: one look at the workers' processes, one walk of the run
folder, and what they cost at their intervals as a share of a core.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from typing import Any

from bench.core import Context, Result
from bench.env import BenchEnv, BenchError, orch_cli, python_env
from bench.pairs import paired, ratios
from bench.table import Row, Target
from orch import procs
from orch.backends.registry import confinement_of
from orch.fleet import caps
from orch.fleet.diskuse import measure_disk
from orch.fleet.watchdog import DISK_EVERY, Watchdog
from orch.fleet.workerprocs import WorkerProcesses
from orch.run.folder import RunFolder
from orch.run.records import WorkerCaps
from orch.settings.internal import STATE_FILE
from orch.waits import wait_for_paths, wait_until

TIMEOUT = 300.0
OFF = ["--pids-per-worker", "off", "--memory-per-worker", "off", "--disk-per-worker", "off", "--run-folder-max", "off"]
LOOKS = 20
CROWD = 1000
"""Idle processes of someone else on the machine while the watchdog is measured (a busy machine)."""
CROWD_CODE = (
    "import os, signal, sys\nfor _ in range(int(sys.argv[1])):\n    os.fork() or signal.pause()\nsignal.pause()"
)


def run(ctx: Context) -> Result:
    missing = ctx.env.claude_missing()
    if missing:
        return Result(skipped=missing)
    ctx.env.model()
    n = 2 if ctx.config.quick else 4
    on_tries, off_tries = paired(ctx.config.repeat, lambda limits: once(ctx.env, n, limits), "on", "off")
    rows = []
    for what, key in (("`orch up --local`", "up_s"), ("brief -> done", "brief_done_s")):
        on = [t[key] for t in on_tries]
        rows.append(Row("caps", f"{what}, caps on (N={n})", "s", on))
        rows.append(
            Row(
                "caps",
                f"{what}: caps on / off (N={n})",
                "x",
                ratios(on, [t[key] for t in off_tries]),
                Target("<=", 1.10, "<= 1.10x"),
                note="prlimit and choom before each agent; the watchdog during the jobs",
            )
        )
    rows.append(Row("caps", "the pane's prefix (prlimit, choom, nice) exec'd before `true`", "ms", _prefix_ms()))
    on = on_tries
    procs_ms = [t["look_ms"] for t in on]
    disk_ms = [t["walk_ms"] for t in on]
    machine = max(t["processes"] for t in on)
    rows.append(
        Row(
            "caps",
            f"watchdog: one look at {n} workers' processes, every process's environment read (before)",
            "ms",
            [t["every_ms"] for t in on],
            note=f"{machine} processes on the machine",
        )
    )
    rows.append(Row("caps", f"watchdog: one look at {n} workers' processes, kept between looks", "ms", procs_ms))
    rows.append(Row("caps", "watchdog: one walk of the run folder", "ms", disk_ms))
    every = caps.WATCH_INTERVAL * DISK_EVERY
    share = [100 * (p / 1000 / caps.WATCH_INTERVAL + d / 1000 / every) for p, d in zip(procs_ms, disk_ms, strict=True)]
    before = [100 * (t["every_ms"] / 1000 / caps.WATCH_INTERVAL + t["walk_ms"] / 1000 / every) for t in on]
    rows.append(
        Row("caps", "watchdog CPU at its intervals, every process's environment read (before)", "% core", before)
    )
    rows.append(
        Row(
            "caps",
            "watchdog CPU at its intervals",
            "% core",
            share,
            Target("<=", 1.0, "<= 1 % of a core"),
            note=f"a look every {caps.WATCH_INTERVAL:g} s, a walk every {every:g} s",
        )
    )
    return Result(rows=rows, raw={"tries": on_tries + off_tries})


def once(env: BenchEnv, workers: int, limits: str) -> dict[str, Any]:
    name = env.name(f"caps-{limits}")
    argv = orch_cli("up", name, "--local", "-n", str(workers), "--workdir", str(env.workdir(name)), "--offline")
    t0 = time.monotonic()
    try:
        done = subprocess.run(
            argv + (OFF if limits == "off" else []), capture_output=True, env=python_env(), timeout=TIMEOUT, check=False
        )
        up_s = time.monotonic() - t0
        if done.returncode != 0:
            raise BenchError(f"orch up exited {done.returncode}: {done.stderr.decode(errors='replace')[-300:]}")
        run = RunFolder.for_name(name)
        # `orch up` alone has no watchdog: run the controller's, as `orch run` does, while the jobs run.
        dog = Watchdog(run, run.info(), list(range(1, workers + 1)), confinement_of(run.info()))
        dog.start()
        try:
            brief_done_s = _brief_to_done(env, run, workers)
        finally:
            dog.close()
        looked = _watchdog(run, workers)
    finally:
        subprocess.run(orch_cli("kill", name), capture_output=True, env=python_env(), check=False, timeout=120)
    return {"limits": limits, "up_s": up_s, "brief_done_s": brief_done_s, **looked}


def _brief_to_done(env: BenchEnv, run: RunFolder, workers: int) -> float:
    t0 = time.monotonic()
    for n in range(1, workers + 1):
        steps = [{"bash": f"touch {run.done(n)}"}, {"reply": "Finished."}]
        brief = env.root / f"{run.name}-brief-{n}.md"
        brief.write_text("# Task\n\n```orch-script\n" + "\n".join(json.dumps(s) for s in steps) + "\n```\n")
        sent = subprocess.run(orch_cli("brief", run.name, str(n), str(brief)), capture_output=True, env=python_env())
        if sent.returncode != 0:
            raise BenchError(f"orch brief exited {sent.returncode}: {sent.stderr.decode(errors='replace')[-300:]}")
    missing = wait_for_paths([run.done(n) for n in range(1, workers + 1)], TIMEOUT)
    if missing:
        raise BenchError(f"no done flag within {TIMEOUT:g}s: {', '.join(str(p) for p in missing)}")
    return time.monotonic() - t0


def _prefix_ms(samples: int = 20) -> list[float]:
    """What the pane's limits add to an agent's start: the prefix of a container's pane before `true`,
    less `true` alone (medians)."""
    prefix = caps.limit_argv(WorkerCaps(), True, 1)
    spans: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(samples):
        for with_prefix in (True, False):
            t0 = time.monotonic()
            subprocess.run([*prefix, "true"] if with_prefix else ["true"], check=True)
            spans[with_prefix].append(time.monotonic() - t0)
    on, off = sorted(spans[True]), sorted(spans[False])
    return [(on[samples // 2] - off[samples // 2]) * 1000]


def _watchdog(run: RunFolder, workers: int) -> dict[str, float]:
    """CPU milliseconds (medians) of a look at the workers' processes as every look was before the watcher
    kept what it read (every process's environment read, `_every_environ`), of
    a later look of one watcher (only what started since the last look is read; each worker's own are
    measured), and of one walk of the run folder; with CROWD idle processes of someone else beside the run,
    as on a busy machine."""
    info = run.info()
    numbers = list(range(1, workers + 1))
    crowd = subprocess.Popen([sys.executable, "-c", CROWD_CODE, str(CROWD)], start_new_session=True)
    try:
        wait_until(lambda: len(procs.children(crowd.pid)) >= CROWD, 60, f"{CROWD} idle processes to start")
        kept = WorkerProcesses(run, numbers, confinement_of(info))
        every, looks, walks = [], [], []
        for _ in range(LOOKS):
            t0 = time.process_time()
            for pids in _every_environ(run, numbers).values():
                procs.load(pids)
            every.append(time.process_time() - t0)
            t0 = time.process_time()
            for pids in kept.look().values():
                procs.load(pids)
            looks.append(time.process_time() - t0)
            t0 = time.process_time()
            measure_disk(run, numbers, confinement_of(info))
            walks.append(time.process_time() - t0)
        machine = len(procs.pids())
    finally:
        os.killpg(crowd.pid, signal.SIGKILL)
        crowd.wait()
    return {
        "every_ms": statistics.median(every) * 1000,
        "look_ms": statistics.median(looks[1:]) * 1000,  # the first of them read every process too
        "walk_ms": statistics.median(walks) * 1000,
        "processes": machine,
    }


def _every_environ(run: RunFolder, workers: list[int]) -> dict[int, set[int]]:
    """The workers' processes as the watchdog found them at every look before: each process of the machine
    with its environment read for the supervisor's state-file variable."""
    marks = {str(run.state(n)): n for n in workers}
    found: dict[int, set[int]] = {n: set() for n in workers}
    for pid in procs.pids():
        mark = procs.env_var(pid, STATE_FILE.name)
        n = marks.get(mark) if isinstance(mark, str) else None
        if n is not None:
            found[n].add(pid)
    return found

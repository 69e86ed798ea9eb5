"""Each agent CLI side by side, offline (the run's gateway and its scripted model, the path a real run
takes): `up` -> every worker ready for N=1 and N=4, RSS per worker just booted and after a task, and
brief -> done for a three-step task (a shell call, a write, the done flag).

The up benchmark measures Claude Code against a recording model server with no gateway; this one puts the
agents on the same footing instead, so their rows compare with each other, not with up's. An agent whose
binary is not installed gets one SKIPPED row.
"""

from __future__ import annotations

import json
import statistics
import time

from bench import procs
from bench.core import Context, Result
from bench.env import BOOT_TIMEOUT, BenchEnv, Fleet
from bench.report import Row
from orch.agents.registry import get_adapter
from orch.contracts import UpRequest
from orch.errors import UsageError
from orch.fleet import launch, talk
from orch.run.folder import RunFolder
from orch.waits import wait_until

AGENTS = ("claude", "codex", "gemini", "opencode")  # aider runs no shell: it cannot post or touch
WORKERS = (1, 4)
MIB = 1 << 20
DONE_TIMEOUT = 120.0


def up(env: BenchEnv, agent: str, workers: int) -> Fleet:
    name = env.name(f"ag-{agent}")
    req = UpRequest(name=name, workers=workers, agent=agent, workdir=env.workdir(name), offline=True)
    start = time.monotonic()
    info = launch.up(req, boot_timeout=BOOT_TIMEOUT)
    live = Fleet(RunFolder.for_name(name), info, time.monotonic() - start)
    env.live.append(live)
    return live


def rss_mib(live: Fleet) -> list[float]:
    return [procs.tree_memory(pid).rss / MIB for _, pid in sorted(live.panes().items())]


def brief_to_done(live: Fleet) -> float:
    """Seconds from `orch brief` (the send included) to worker 1's done flag."""
    run = live.run
    steps = [
        {"bash": f"orch bus post {run.name} --as 1 'bench'"},
        {"write": str(run.result(1)), "content": "bench result\n"},
        {"bash": f"touch {run.done(1)}"},
        {"reply": "Finished."},
    ]
    script = "\n".join(json.dumps(s) for s in steps)
    start = time.monotonic()
    talk.brief(run, 1, f"# Bench task\n\n```orch-script\n{script}\n```\n")
    wait_until(run.done(1).exists, DONE_TIMEOUT, "the bench task's done flag", watch=run.outbox(1))
    return time.monotonic() - start


def measure(env: BenchEnv, agent: str, repeat: int) -> list[Row]:
    ups: dict[int, list[float]] = {n: [] for n in WORKERS}
    idle: list[float] = []
    after: list[float] = []
    done: list[float] = []
    for _ in range(repeat):
        for n in WORKERS:
            live = up(env, agent, n)
            try:
                ups[n].append(live.up_seconds)
                idle += rss_mib(live)
                if n == 1:
                    done.append(brief_to_done(live))
                    after += rss_mib(live)
            finally:
                env.kill(live)
    rows = [Row("agents", f"{agent}: up -> {n} ready", "s", ups[n]) for n in WORKERS]
    note = f"median of {len(idle)} workers" if idle else ""
    rows += [
        Row("agents", f"{agent}: RSS per worker, just booted", "MiB", [statistics.median(idle)], note=note),
        Row("agents", f"{agent}: RSS per worker, after a task", "MiB", [statistics.median(after)]),
        Row("agents", f"{agent}: brief -> done (3 tool calls)", "s", done),
    ]
    return rows


def run(ctx: Context) -> Result:
    rows: list[Row] = []
    for agent in AGENTS:
        try:
            get_adapter(agent).binary()
        except UsageError as exc:
            rows.append(Row("agents", f"{agent}: skipped", "", status="SKIPPED", note=exc.one_line()))
            continue
        rows += measure(ctx.env, agent, ctx.config.repeat)
    return Result(rows=rows)

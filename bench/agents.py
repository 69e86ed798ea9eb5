"""Each agent CLI side by side, offline (the run's gateway and its scripted model, the path a real run
takes): `up` -> every worker ready for N=1 and N=4, RSS per worker just booted and after a task, and
brief -> done for a three-step task (a shell call, a write, the done flag).

aider runs no shell command orch can count on (orch/agents/aider/adapter.py: it applies the model's edit blocks,
and refuses shell blocks under --yes-always), so its task is the same minus the bus post: the result and
the done flag as two edit blocks in one answer (its row's name says so). Agents run interleaved in each
repeat, and the ratio rows pair each agent's figure with Claude Code's of the same repeat.

The up benchmark measures Claude Code against a recording model server with no gateway; this one puts the
agents on the same footing instead, so their rows compare with each other, not with up's. An agent whose
binary is not installed gets one SKIPPED row.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from dataclasses import dataclass, field

from bench import procs
from bench.core import Context, Result
from bench.env import BOOT_TIMEOUT, BenchEnv, BenchError, Fleet
from bench.overhead import controller_events
from bench.pairs import ratios
from bench.table import Row, Target
from orch.agents.registry import get_adapter
from orch.backends.local.backend import LocalSettings
from orch.backends.local.sandbox import LocalSandbox
from orch.contracts import UpRequest
from orch.errors import OrchError, UsageError
from orch.fleet import talk
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.waits import wait_until

AGENTS = ("claude", "codex", "gemini", "opencode", "aider")
WORKERS = (1, 4)
MIB = 1 << 20
DONE_TIMEOUT = 120.0
MEASUREMENT_ERRORS = (OrchError, BenchError, OSError, TimeoutError)


def up(env: BenchEnv, agent: str, workers: int) -> Fleet:
    name = env.name(f"ag-{agent}")
    req = UpRequest(name=name, workers=workers, agent=agent, workdir=env.workdir(name), offline=True)
    start = time.monotonic()
    info = LocalSandbox(LocalSettings(boot_timeout=BOOT_TIMEOUT)).up(req)
    live = Fleet(RunFolder.for_name(name), info, time.monotonic() - start)
    env.live.append(live)
    return live


def rss_mib(live: Fleet) -> list[float]:
    return [procs.tree_memory(pid).rss / MIB for _, pid in sorted(live.panes().items())]


def task(run: RunFolder) -> list[dict[str, str]]:
    """The scripted steps of the bench task, the same for every agent: a bus post, the result, the done flag."""
    return [
        {"bash": f"orch bus post {run.name} --as 1 'bench'"},
        {"write": str(run.result(1)), "content": "bench result\n"},
        {"bash": f"touch {run.done(1)}"},
        {"reply": "Finished."},
    ]


ORCH_PART = Target("<=", 0.3, "<= 0.3 s")
"""Issue 35: orch's share of brief -> done, for every agent CLI."""


def brief_to_done(live: Fleet) -> tuple[float, float, float]:
    """Seconds from `orch brief` (the send included) to worker 1's done flag being seen; of those the worker's own
    span: its brief acknowledged (UserPromptSubmit) -> its done flag written (mtime); and orch's own part: the
    brief's start to the Enter the agent took (the `sent` event's `entered`: the paste, a lost Enter pressed again),
    plus the flag written to seen. The difference is the agent's, between taking the Enter and saying so (a first
    prompt's session made by opencode, Gemini CLI starting its hook)."""
    run = live.run
    steps = task(run)
    script = "\n".join(json.dumps(s) for s in steps)
    wall0, start = time.time(), time.monotonic()
    talk.brief(run, 1, f"# Bench task\n\n```orch-script\n{script}\n```\n")
    wait_until(run.done(1).exists, DONE_TIMEOUT, "the bench task's done flag", watch=run.outbox(1))
    total, seen = time.monotonic() - start, time.time()
    acks = [e.ts for e in run.hook_events(1) if e.hook_event_name == "UserPromptSubmit" and e.ts >= wall0]
    sent = [e.data["entered"] for e in controller_events(live, Event.SENT) if e.worker == 1 and "entered" in e.data]
    if not acks or not sent:
        raise BenchError("worker 1 has no UserPromptSubmit, or its brief no `sent` event")
    flag = run.done(1).stat().st_mtime
    return total, flag - acks[0], (sent[-1] - wall0) + (seen - flag)


@dataclass
class Samples:
    """What one agent gave over the repeats (keyed by repeat, so ratios pair runs made side by side)."""

    ups: dict[int, dict[int, float]] = field(default_factory=lambda: {n: {} for n in WORKERS})
    idle: list[float] = field(default_factory=list)
    after: list[float] = field(default_factory=list)
    done: dict[int, float] = field(default_factory=dict)
    span: dict[int, float] = field(default_factory=dict)
    """The worker's own part of `done` (acknowledged -> flag written): the rest is the brief's delivery
    (paste, Enter, the agent taking it) and noticing the flag."""
    orch: dict[int, float] = field(default_factory=dict)
    """orch's own part of `done`: the brief to the Enter the agent took, and the flag written to seen."""
    errors: list[str] = field(default_factory=list)
    stopped: bool = False
    """An `up` failed: the agent is measured no further (its other rows keep what it gave)."""


def sample(env: BenchEnv, agent: str, repeat: int, got: Samples) -> None:
    """One repeat of `agent`: up N=1 (then its task) and N=4; a failure is noted, not raised."""
    for n in WORKERS:
        try:
            live = up(env, agent, n)
        except MEASUREMENT_ERRORS as exc:
            got.errors.append(f"up N={n}: {_one_line(exc)}")
            got.stopped = True
            return
        try:
            got.ups[n][repeat] = live.up_seconds
            got.idle += rss_mib(live)
            if n == 1:
                got.done[repeat], got.span[repeat], got.orch[repeat] = brief_to_done(live)
                got.after += rss_mib(live)
        except MEASUREMENT_ERRORS as exc:
            got.errors.append(f"N={n}: {_one_line(exc)}")
        finally:
            env.kill(live)


def rows_of(agent: str, got: Samples, claude: Samples | None) -> list[Row]:
    rows = [Row("agents", f"{agent}: up -> {n} ready", "s", list(got.ups[n].values())) for n in WORKERS]
    rows += [
        Row(
            "agents", f"{agent}: RSS per worker, just booted", "MiB", _median(got.idle), note=f"{len(got.idle)} workers"
        ),
        Row("agents", f"{agent}: RSS per worker, after a task", "MiB", _median(got.after)),
        Row("agents", f"{agent}: brief -> done (3 tool calls)", "s", list(got.done.values())),
        Row(
            "agents",
            f"{agent}: brief -> done, beyond the worker's own span",
            "s",
            [got.done[r] - got.span[r] for r in sorted(got.done) if r in got.span],
            note="delivering the brief until the agent takes it, and noticing the flag",
        ),
        Row(
            "agents",
            f"{agent}: brief -> done, orch's own part",
            "s",
            list(got.orch.values()),
            ORCH_PART,
            note="the brief to the Enter the agent took, and its flag written to seen",
        ),
    ]
    if claude is not None and claude is not got:  # per repeat, against Claude Code's run just before
        for n in WORKERS:
            rows.append(
                Row("agents", f"{agent}: up -> {n} ready / Claude Code's", "x", ratios(got.ups[n], claude.ups[n]))
            )
        rows.append(Row("agents", f"{agent}: brief -> done / Claude Code's", "x", ratios(got.done, claude.done)))
    for row in rows:
        if not row.values:
            row.status, row.note = "ERROR", "; ".join(got.errors)[:300] or "no sample"
    if got.errors and rows[0].values:
        rows[0].note = f"{len(got.errors)} failure(s): {got.errors[0][:200]}"
    return rows


def run(ctx: Context) -> Result:
    rows: list[Row] = []
    present: list[str] = []
    for agent in AGENTS:
        try:
            get_adapter(agent).binary()
            present.append(agent)
        except UsageError as exc:
            rows.append(Row("agents", f"{agent}: skipped", "", status="SKIPPED", note=exc.one_line()))
    got = {agent: Samples() for agent in present}
    for repeat in range(ctx.config.repeat):  # agents interleaved in each repeat: the same load for all
        for agent in present:
            if not got[agent].stopped:
                sample(ctx.env, agent, repeat, got[agent])
    claude = got.get("claude")
    for agent in present:
        rows += rows_of(agent, got[agent], claude)
    raw = {agent: dataclasses.asdict(samples) for agent, samples in got.items()}
    return Result(rows=rows, raw=raw)


def _median(values: list[float]) -> list[float]:
    return [statistics.median(values)] if values else []


def _one_line(exc: BaseException) -> str:
    text = exc.one_line() if isinstance(exc, OrchError) else str(exc)
    return f"{type(exc).__name__}: {' '.join(text.split())[:200]}"

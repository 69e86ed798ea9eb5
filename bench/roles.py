"""Where a fleet's CPU goes, process by process and role by role (`--only roles`), for N workers of real
Claude Code, offline under local strict isolation.

Per N, one `orch run SPEC --local` (the spec offline: the run's gateway and its scripted model) in a cgroup
of its own (bench/cpuwindow.py: every process, the shortest-lived included, from the kernel's accounting),
through three windows:

- `up`: from `orch run` started to its first brief (the controller, gateway, relay, tmux, sandboxes and the
  agents booting);
- `turn`: from the first brief until every worker has ended its turn: each worker's brief has three scripted
  model turns (an `orch bus post`, a write of its result, a reply; no done flag, so the controller keeps
  watching), and the window's CPU is divided by the model turns the workers' hooks logged;
- `idle`: a minute of the same fleet with nothing to do, the controller watching.

Then the controller is stopped (SIGINT), the fleet killed (`orch kill`), and anything left in the cgroup
killed and counted. The roles are bench/rolemap.py's. The "floor" is the agents' own CPU in `up` over this
machine's cores: no `up` can be faster. Every figure of one N comes from one run, so its ratios meet one
load; what other users ran meanwhile is measured too (the machine's busy CPU outside the cgroup).
"""

from __future__ import annotations

import compileall
import itertools
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import procs, rolemap
from bench.core import Context, Result
from bench.cpuwindow import Mark, Span, Tracker, cgroup2_root
from bench.env import REPO, BenchEnv, BenchError, orch_cli, python_env
from bench.pairs import in_turn
from bench.roletable import MIB, WINDOWS, before_rows, rows
from bench.starts import sources_at
from bench.taskstats import Listener
from orch import prereqs
from orch.errors import OrchError
from orch.run.folder import RunFolder
from orch.waits import wait_until

RESERVE = 2 << 30
"""Memory left to the machine when deciding whether N workers fit."""
WORKER_GUESS = 300 * MIB
"""A Claude Code worker's memory until one N has been measured (bench/README.md: RSS ~220-270 MiB, of which
the binary's pages are shared: PSS ~120 MiB)."""
TURNS_PER_WORKER = 3
STOP_TIMEOUT = 60.0


def spec_text(name: str, workdir: Path, workers: int) -> str:
    """Each worker one task of three scripted model turns, no done flag: it goes idle, the controller waits."""
    tasks = []
    for n in range(1, workers + 1):
        steps = [
            {"bash": f"orch bus post {name} 'worker {n} here'"},
            {"write": "{{result_file}}", "content": "nothing to report\n"},
            {"reply": "Waiting."},
        ]
        script = "".join(f"\n      - {json.dumps(step)}" for step in steps)
        goal = f"Determine whether file {n} exists."
        tasks.append(f"  - id: t{n}\n    goal: {goal}\n    worker: {n}\n    offline_script:{script}")
    boot = 120 + 8 * workers
    return (
        f"name: {name}\nworkdir: {workdir}\nworkers: {workers}\ndispatch: per-worker\noffline: true\n"
        "tasks:\n" + "\n".join(tasks) + "\n"
        f"timeouts:\n  boot: {boot}\n  job: 7200\n  run: 7200\nlimits:\n  nudge_after: 7200\n"
    )


class Tail:
    """New lines of a file since the last read, parsed as JSON objects (a garbled line skipped)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def lines(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset += end
        out = []
        for line in data[:end].splitlines():
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                out.append(value)
        return out


@dataclass
class Watch:
    """What the bench follows of a run, cheaply (it shares the cores): events.jsonl and the hook logs."""

    run: RunFolder
    workers: int
    events: Tail = field(init=False)
    hooks: dict[int, Tail] = field(init=False)
    briefed: bool = False
    prompted: set[int] = field(default_factory=set)
    idle: set[int] = field(default_factory=set)
    turns: int = 0

    def __post_init__(self) -> None:
        self.events = Tail(self.run.events)
        self.hooks = {n: Tail(self.run.state(n)) for n in range(1, self.workers + 1)}

    def first_brief(self) -> bool:
        self.briefed = self.briefed or any(e.get("event") == "brief-sending" for e in self.events.lines())
        return self.briefed

    def settled(self) -> bool:
        """Every worker took its brief and ended the turns after it (its last hook a Stop)."""
        for n, tail in self.hooks.items():
            for event in tail.lines():
                name = event.get("hook_event_name")
                if name == "UserPromptSubmit":
                    self.prompted.add(n)
                    self.idle.discard(n)
                elif n in self.prompted:
                    if name in ("PreToolUse", "Stop", "StopFailure"):
                        self.turns += 1
                    if name in ("Stop", "StopFailure"):
                        self.idle.add(n)
                    elif name not in ("Notification",):
                        self.idle.discard(n)
        return len(self.idle) == self.workers


def _busy_cpu() -> float:
    """Seconds of CPU this machine spent busy since boot, all cores (/proc/stat: not idle, not iowait)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(v) for v in fields]
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def _window(span: Span, busy: float, bench_cpu: float) -> dict[str, Any]:
    cpu, count = rolemap.split(span.procs)
    return {
        "seconds": span.seconds,
        "cpu": cpu,
        "processes": count,
        "attributed_s": span.cpu,
        "cgroup_s": span.cgroup_cpu,
        "coverage": span.coverage,
        "exits_lost": span.lost,
        "others_s": max(0.0, busy - span.cgroup_cpu - bench_cpu),
        "bench_s": bench_cpu,
        "orch_share": rolemap.orch_share(cpu),
    }


def _bench_cpu() -> float:
    t = os.times()
    return t.user + t.system


def brief_text(name: str, n: int) -> str:
    """A brief whose scripted steps are the spec's (for N = 1, driven by `orch brief`)."""
    steps = [
        {"bash": f"orch bus post {name} 'worker {n} here'"},
        {"write": f"result-{n}.md", "content": "nothing to report\n"},
        {"reply": "Waiting."},
    ]
    script = "\n".join(json.dumps(step) for step in steps)
    return f"# Bench task\n\n```orch-script\n{script}\n```\n"


def measure(env: BenchEnv, workers: int, idle_seconds: float, tree: Path | None = None) -> dict[str, Any]:
    """One fleet of `workers` through the three windows (see the module's docstring). `orch run` refuses a
    fleet of one finder (no one to verify it): N = 1 is `orch up` and `orch brief` instead, no controller.
    `tree`: orch's sources at another revision, first on every process's PYTHONPATH (`--before`)."""
    name = env.name(f"roles{workers}{'b' if tree else ''}")
    cli_env = python_env() if tree is None else {**os.environ, "PYTHONPATH": str(tree)}
    controller = workers > 1
    tracker = Tracker(f"ob-{name}-{os.getpid()}")
    tracker.start()
    run = RunFolder.for_name(name)
    log = (env.root / f"{name}.log").open("wb")
    proc: subprocess.Popen[bytes] | None = None
    marks: list[tuple[Mark, float, float]] = []
    watch = Watch(run, workers)

    def mark() -> None:
        marks.append((tracker.mark(), _busy_cpu(), _bench_cpu()))

    def running() -> bool:
        """False while `orch run` runs; raises once it has exited (a window's end never comes then)."""
        if proc is not None and proc.poll() is not None:
            raise BenchError(f"orch run exited {proc.returncode}; see {log.name}")
        return False

    def cli(*args: str, stdin: str = "") -> None:
        argv = tracker.cgroup.argv(orch_cli(*args))
        done = subprocess.run(
            argv, input=stdin.encode(), stdout=log, stderr=log, env=cli_env, cwd=env.root, check=False
        )
        if done.returncode != 0:
            raise BenchError(f"orch {args[0]} exited {done.returncode}; see {log.name}")

    boot = 120 + 8 * workers
    available = procs.available_memory()
    try:
        mark()
        if controller:
            spec = env.root / f"{name}.yaml"
            spec.write_text(spec_text(name, env.workdir(name), workers))
            argv = tracker.cgroup.argv(orch_cli("run", str(spec), "--local", "--name", name))
            # Not in this repository: a `python -m` it starts would import the tree here before PYTHONPATH's.
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=cli_env, cwd=env.root)
            wait_until(lambda: running() or watch.first_brief(), boot + 60, "the first brief", interval=0.05)
        else:
            workdir = str(env.workdir(name))
            cli("up", name, "-n", str(workers), "--local", "--offline", "-w", workdir, "--boot-timeout", str(boot))
        mark()
        if not controller:
            for n in range(1, workers + 1):
                cli("brief", name, str(n), "-", stdin=brief_text(name, n))
        turns = 60 + 2 * workers
        wait_until(lambda: running() or watch.settled(), turns, "every worker to end its turns", interval=0.1)
        mark()
        memory = [procs.tree_memory(pid) for pid in _agent_pids(tracker)]
        taken = available - procs.available_memory()  # what the fleet took from the machine, shared pages once
        time.sleep(idle_seconds)  # the idle window: nothing to wait for, by design
        running()
        mark()
    finally:
        leftovers = _stop(tracker, proc, name, cli_env)
        log.close()
        tracker.stop()
    windows = {}
    for key, (a, b) in zip(WINDOWS, itertools.pairwise(marks), strict=False):
        windows[key] = _window(tracker.span(a[0], b[0]), b[1] - a[1], b[2] - a[2])
    return {
        "workers": workers,
        "tree": "now" if tree is None else "before",
        "controller": controller,
        "windows": windows,
        "turns": watch.turns,
        "rss_per_worker": (sum(m.rss for m in memory) / len(memory)) if memory else None,
        "pss_per_worker": (sum(m.pss for m in memory) / len(memory)) if memory else None,
        "memory_per_worker": taken / workers,
        "leftover_processes": leftovers,
    }


def _agent_pids(tracker: Tracker) -> list[int]:
    return [p for p in tracker.cgroup.pids() if (seen := procs.snapshot(p)) is not None and seen.comm == "claude"]


def _stop(tracker: Tracker, proc: subprocess.Popen[bytes] | None, name: str, env: dict[str, str]) -> int:
    """Stop the controller (SIGINT: the fleet stays), kill the fleet, then whatever is left in the cgroup:
    how many processes that was."""
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT)
    subprocess.run(orch_cli("kill", name), capture_output=True, env=env, timeout=120, check=False)
    try:
        wait_until(lambda: not tracker.cgroup.pids(), 20.0, "the killed fleet's processes to exit", interval=0.1)
        return 0
    except OrchError:
        left = len(tracker.cgroup.pids())
        tracker.cgroup.kill()
        return left


def byte_compiled(package: Path) -> None:
    """Byte-compile orch's modules, as installing orch does (pip compiles a wheel's, the image's included): with
    PYTHONDONTWRITEBYTECODE set, as on the machines this was measured on, every orch process of an editable
    checkout compiled each module it imported again, 30-80 ms of CPU a process that no installed orch pays."""
    if not compileall.compile_dir(package, quiet=1):
        raise BenchError(f"could not byte-compile {package}")


def why_not() -> str | None:
    """Why this machine cannot run the benchmark, or None."""
    try:
        prereqs.bwrap_works()
    except OrchError as exc:
        return exc.one_line()
    if cgroup2_root() is None:
        return "no cgroup v2 hierarchy is mounted (the fleet's exact CPU total)"
    return Listener.check()


def run(ctx: Context) -> Result:
    reason = why_not()
    if reason is not None:
        return Result(skipped=reason)
    cfg = ctx.config
    tries: list[dict[str, Any]] = []
    skipped: dict[int, str] = {}
    per_worker = WORKER_GUESS
    before = sources_at(cfg.before, ctx.env.root / "before") if cfg.before else None
    for tree in (REPO, before):
        if tree is not None:
            byte_compiled(tree / "orch")
    for n in cfg.roles_workers:
        available = procs.available_memory() - RESERVE
        if n * per_worker > available:
            skipped[n] = (
                f"N={n} needs ~{n * per_worker / (1 << 30):.1f} GiB ({per_worker / MIB:.0f} MiB a worker), "
                f"{available / (1 << 30):.1f} GiB available beyond a 2 GiB reserve"
            )
            continue
        for repeat in range(cfg.repeat):
            for label in in_turn(repeat, "now", "before") if before is not None else ("now",):
                got = measure(ctx.env, n, cfg.roles_idle_seconds, before if label == "before" else None)
                tries.append(got)
                # The next N's need: what this fleet took from MemAvailable per worker (its agents' shared pages
                # once, its own fixed part spread), never less than its agents' proportional share.
                per_worker = int(max(got["memory_per_worker"], got["pss_per_worker"] or 0) * 1.2) or per_worker
    now = [t for t in tries if t.get("tree", "now") == "now"]
    out = rows(now, skipped, cfg.roles_idle_seconds)
    if before is not None:
        out += before_rows(now, [t for t in tries if t.get("tree") == "before"], cfg.before or "")
    return Result(rows=out, raw={"tries": tries, "skipped": skipped, "before": cfg.before})

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
from bench.env import BenchEnv, BenchError, orch_cli, python_env
from bench.pairs import in_turn, ratios
from bench.starts import sources_at
from bench.table import Row, Target
from bench.taskstats import Listener
from orch import prereqs
from orch.errors import OrchError
from orch.run.folder import RunFolder
from orch.waits import wait_until

WINDOWS = ("up", "turn", "idle")
SHARE = Target("<=", 10.0, "<= 10 %")
FLOOR = Target("<=", 1.15, "<= 1.15x")
LINEAR = Target("<=", 1.10, "<= 1.1x")
MIB = 1 << 20
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


if __name__ == "__main__":  # `python -m bench.roles RESULTS.json`: the attribution tables for bench/README.md
    import sys

    data = json.loads(Path(sys.argv[1]).read_text())
    raw = data["benches"]["roles"]["raw"]
    for tree in ("now", "before") if raw.get("before") else ("now",):
        for key in WINDOWS:
            title = key if tree == "now" else f"{key}, at {raw['before']}"
            print(f"\n### {title}\n\n{table(raw['tries'], key, tree)}")

"""Process starts (`--only starts`): what every `orch` process and every run's gateway pay before they work.

Two figures, each a process started from scratch: a worker's `orch bus post` (the fast path, a run folder on
this machine) and a run's gateway with the scripted upstream (`start_gateway` until its handle, then its
first `/_orch/health` answer: the supervisor, the scripted model and the server child). Wall time and the
CPU of the processes (the bench's children, reaped). With `--before REV` the same is measured for orch's
sources at REV (`git archive`, put first on PYTHONPATH of every process), side by side with the tree's own
(bench/pairs.py: in turn, so both meet the same load), and a ratio row pairs each repeat.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from io import BytesIO
from pathlib import Path

from bench.core import Context, Result
from bench.env import REPO, BenchError
from bench.pairs import paired, ratios
from bench.table import Row

TIMEOUT = 120.0
# One start of the run's gateway, in a process of its own (so --before measures the caller's side too).
GATEWAY = """
import json, os, resource, secrets, sys, tempfile, time
from pathlib import Path
from pydantic import SecretStr
from orch.gateway.process import GatewayClient, start_gateway, stop_gateway
from orch.gateway.modeldir import GatewayBoot, Upstream
tmp = Path(tempfile.mkdtemp(prefix="ob-gw-"))
(tmp / "run").mkdir()
boot = GatewayBoot(run="gw", run_dir=str(tmp / "run"), upstreams=[Upstream(kind="scripted")],
                   control_key=SecretStr(secrets.token_hex(16)), offline=True)
t0 = time.perf_counter()
handle = start_gateway(boot, tmp / "h.json", tmp / "gw.log")
ok = GatewayClient(handle).info().get("ok")
wall = time.perf_counter() - t0
stop_gateway(tmp / "h.json")
used = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"ok": ok, "wall_ms": wall * 1000, "cpu_ms": (used.ru_utime + used.ru_stime) * 1000}))
"""
BUS_POST = "from orch.cli.main import main; main()"
MAKE_RUN = """
from orch.run.folder import RunFolder
from orch.run.records import LocalRunInfo
info = LocalRunInfo(name="r", agent="scripted", workers=2, workdir="/w", permission_mode="default",
                    tmux_socket="orch-r", orch_version="bench")
RunFolder.for_name("r").create(info)
"""


def sources_at(rev: str, into: Path) -> Path:
    """orch's sources at `rev` (a git revision of this repository) under `into`."""
    done = subprocess.run(["git", "-C", str(REPO), "archive", rev, "orch"], capture_output=True, check=False)
    if done.returncode != 0:
        raise BenchError(f"git archive {rev}: {done.stderr.decode(errors='replace').strip()[:200]}")
    with tarfile.open(fileobj=BytesIO(done.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def _env(tree: Path, home: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree), "ORCH_HOME": str(home)}


def _timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, str]:
    """Wall and CPU (ms) of one process (with every process it waited for) and what it printed."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise BenchError(f"{' '.join(argv[:4])}... failed: {done.stderr.strip()[-300:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall * 1000, cpu * 1000, done.stdout


def bus_post(tree: Path, home: Path, cwd: Path, samples: int) -> dict[str, float]:
    """Median wall and CPU of `samples` posts as worker 1 of run `r` (made by the tree itself)."""
    walls, cpus = [], []
    for i in range(samples):
        argv = [sys.executable, "-c", BUS_POST, "bus", "post", "r", "--as", "1", f"start {i}"]
        wall, cpu, _ = _timed(argv, _env(tree, home), cwd)
        walls.append(wall)
        cpus.append(cpu)
    return {"wall_ms": statistics.median(walls), "cpu_ms": statistics.median(cpus)}


def gateway(tree: Path, home: Path, cwd: Path) -> dict[str, float]:
    _, _, out = _timed([sys.executable, "-c", GATEWAY], _env(tree, home), cwd)
    data = json.loads(out)
    if data["ok"] is not True:
        raise BenchError(f"the gateway did not answer its health check: {data}")
    return {"wall_ms": float(data["wall_ms"]), "cpu_ms": float(data["cpu_ms"])}


def run(ctx: Context) -> Result:
    cfg = ctx.config
    root = Path(tempfile.mkdtemp(prefix="ob-starts-"))
    try:
        trees = {"now": REPO}
        if cfg.before:
            trees["before"] = sources_at(cfg.before, root / "before")
        homes = {}
        for label, tree in trees.items():  # the same run folder, made by each tree's own records
            homes[label] = root / f"home-{label}"
            subprocess.run([sys.executable, "-c", MAKE_RUN], env=_env(tree, homes[label]), cwd=root, check=True)
        samples = max(3, cfg.cli_samples // 3)

        def bus(label: str) -> dict[str, float]:
            return bus_post(trees[label], homes[label], root, samples)

        def gateway_start(label: str) -> dict[str, float]:
            return gateway(trees[label], homes[label], root)

        figures: dict[str, Callable[[str], dict[str, float]]] = {"bus": bus, "gateway": gateway_start}
        labels = list(trees)
        got: dict[str, dict[str, list[dict[str, float]]]] = {}
        for what, measure in figures.items():
            if len(labels) == 2:
                now, before = paired(cfg.repeat, measure, "now", "before")
                got[what] = {"now": now, "before": before}
            else:
                got[what] = {"now": [measure("now") for _ in range(cfg.repeat)]}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    names = {
        "bus": f"`orch bus post` process (median of {samples} per repeat)",
        "gateway": "run gateway start, scripted upstream, to its first health answer",
    }
    rows = []
    for what, by_label in got.items():
        for key, unit_name in (("wall_ms", "wall"), ("cpu_ms", "CPU")):
            for label, tries in by_label.items():
                suffix = "" if label == "now" else f" at {cfg.before}"
                rows.append(Row("starts", f"{names[what]}, {unit_name}{suffix}", "ms", [t[key] for t in tries]))
            if "before" in by_label:
                pairs = ratios([t[key] for t in by_label["now"]], [t[key] for t in by_label["before"]])
                rows.append(Row("starts", f"{names[what]}, {unit_name}: now / {cfg.before}", "x", pairs))
    return Result(rows=rows, raw=got)

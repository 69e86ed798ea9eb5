"""The container backend: image size, a bare container's start, and `orch up` (no --local) to ready.

Runs only when a Docker engine answers and the orch image is present; otherwise it says which was
missing. `orch up` goes through the real command (interpreter start included, as a user sees it) with
`--offline`: the run's own scripted model server starts inside the container. Timeline from the run
folder: the first "spawned" event is the controller (`orch serve-run`) launching workers inside the
container; `up` returns once that controller reports every worker booted (run.json: running).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import os
import subprocess
import time
from typing import Any

from bench.core import Context, Result
from bench.env import BenchEnv, BenchError, orch_cli, python_env
from bench.pairs import paired, ratios
from bench.table import Row, Target
from orch.container.layout import run_mount
from orch.errors import OrchError
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.settings.user import IMAGE
from orch.waits import wait_for_paths

MIB = 1 << 20
UP_TIMEOUT = 600.0
LABEL_RUN = "orch.run"
CONTAINER_UID = 1000  # what the docker backend runs workers as when orch is invoked as root
ISOLATIONS = ("shared", "strict")


def run(ctx: Context) -> Result:
    try:
        import docker.errors

        from orch.backends.docker.engine import docker_client

        client = docker_client()
    except (ImportError, OrchError) as exc:
        reason = exc.one_line() if isinstance(exc, OrchError) else str(exc)
        return Result(skipped=f"no Docker engine: {reason}")
    image_name = IMAGE.get()
    try:
        image = client.images.get(image_name)
    except docker.errors.ImageNotFound:
        return Result(
            skipped=f"image {image_name} not built (`orch image build` or `python -m orch.backends.docker.image`)"
        )
    cfg = ctx.config
    rows = [Row("container", f"image size ({image_name})", "MiB", [float(image.attrs["Size"]) / MIB])]
    starts = []
    for _ in range(cfg.repeat):
        t0 = time.monotonic()
        client.containers.run(image_name, ["true"], remove=True, network_mode="none")
        starts.append(time.monotonic() - t0)
    rows.append(Row("container", "bare container run (`true`), create to exit", "s", starts))
    raw: dict[str, Any] = {"image": image_name, "image_bytes": image.attrs["Size"], "bare_run_s": starts}
    sizes = (1,) if cfg.quick else (1, 4)
    by_size = {n: paired(cfg.repeat, functools.partial(up_once, ctx.env, client, n), *ISOLATIONS) for n in sizes}
    tries = [t for pair in by_size.values() for side in pair for t in side]
    for n in sizes:
        for what, key in (("`orch up`", "up_s"), ("brief -> done", "brief_done_s")):
            shared = [t[key] for t in by_size[n][0]]
            strict = [t[key] for t in by_size[n][1]]
            rows.append(Row("container", f"{what}, strict isolation (N={n})", "s", strict))
            rows.append(
                Row(
                    "container",
                    f"{what}: strict / shared isolation (N={n})",
                    "x",
                    ratios(strict, shared),
                    Target("<=", 1.10, "<= 1.10x"),
                    note="each worker its own uid, outbox and launch bundle vs one uid for all",
                )
            )
    for n in sizes:
        mine = by_size[n][0]
        rows.append(
            Row(
                "container",
                f"cold start -> controller launching (N={n})",
                "s",
                [t["controller_start_s"] for t in mine if t["controller_start_s"] is not None],
                note="from `orch up` to the controller's first worker spawn inside the container",
            )
        )
        rows.append(
            Row(
                "container",
                f"`orch up` -> controller ready, {n} worker(s) booted",
                "s",
                [t["up_s"] for t in mine],
                note="container start, egress set-up, tmux, agents",
            )
        )
    raw["tries"] = tries
    return Result(rows=rows, raw=raw)


def up_once(env: BenchEnv, client: Any, workers: int, isolation: str = "shared") -> dict[str, Any]:
    """`orch up` to ready, then every worker briefed with one scripted step (touch its done flag) to the
    last done flag: what isolation adds to the start and to a job's round trip."""
    name = env.name(f"ctr{workers}")
    workdir = env.workdir(name)
    if os.geteuid() == 0:  # the container's workers run as uid 1000 then, and must be able to write it
        os.chown(workdir, CONTAINER_UID, CONTAINER_UID)
    argv = orch_cli("up", name, "-n", str(workers), "--workdir", str(workdir), "--offline", "--isolation", isolation)
    started = time.time()
    t0 = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, env=python_env(), check=False, timeout=UP_TIMEOUT)
        up_s = time.monotonic() - t0
        if done.returncode != 0:
            raise BenchError(f"orch up (container) exited {done.returncode}: {_tail(done.stderr)}")
        run = RunFolder.for_name(name)
        spawned = _first_spawn(run)
        brief_done_s = _brief_to_done(env, run, workers)
    finally:
        subprocess.run(orch_cli("kill", name), capture_output=True, env=python_env(), check=False, timeout=120)
        with contextlib.suppress(Exception):  # only ours: the label carries our unique run name
            for leftover in client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={name}"}):
                leftover.remove(force=True)
    return {
        "workers": workers,
        "isolation": isolation,
        "up_s": up_s,
        "brief_done_s": brief_done_s,
        "controller_start_s": spawned - started if spawned is not None else None,
    }


def _brief_to_done(env: BenchEnv, run: RunFolder, workers: int) -> float:
    inside = run_mount(run.name)
    t0 = time.monotonic()
    for n in range(1, workers + 1):
        flag = f"{inside}/{run.done(n).relative_to(run.root)}"
        steps = [{"bash": f"touch {flag}"}, {"reply": "Finished."}]
        brief = env.workdir(run.name).parent / f"{run.name}-brief-{n}.md"
        brief.write_text("# Task\n\n```orch-script\n" + "\n".join(json.dumps(s) for s in steps) + "\n```\n")
        sent = subprocess.run(
            orch_cli("brief", run.name, str(n), str(brief)), capture_output=True, env=python_env(), check=False
        )
        if sent.returncode != 0:
            raise BenchError(f"orch brief exited {sent.returncode}: {_tail(sent.stderr)}")
    missing = wait_for_paths([run.done(n) for n in range(1, workers + 1)], UP_TIMEOUT)
    if missing:
        raise BenchError(f"no done flag within {UP_TIMEOUT:g}s: {', '.join(str(p) for p in missing)}")
    return time.monotonic() - t0


def _first_spawn(run: RunFolder) -> float | None:
    try:
        lines = run.events.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            event = json.loads(line)
            if event["event"] == Event.SPAWNED:
                return dt.datetime.fromisoformat(event["ts"].replace("Z", "+00:00")).timestamp()
    return None


def _tail(raw: bytes) -> str:
    return " ".join(raw.decode(errors="replace").split())[-300:]

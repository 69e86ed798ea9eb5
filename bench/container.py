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
import json
import os
import subprocess
import time
from typing import Any

from bench.core import Context, Result
from bench.env import BenchEnv, BenchError, orch_cli, python_env
from bench.report import Row
from orch import settings
from orch.errors import OrchError
from orch.run.events import Event
from orch.run.folder import RunFolder

MIB = 1 << 20
UP_TIMEOUT = 600.0
LABEL_RUN = "orch.run"
CONTAINER_UID = 1000  # what the docker backend runs workers as when orch is invoked as root


def run(ctx: Context) -> Result:
    try:
        import docker.errors

        from orch.container.engine import docker_client

        client = docker_client()
    except (ImportError, OrchError) as exc:
        reason = exc.one_line() if isinstance(exc, OrchError) else str(exc)
        return Result(skipped=f"no Docker engine: {reason}")
    image_name = settings.IMAGE.get()
    try:
        image = client.images.get(image_name)
    except docker.errors.ImageNotFound:
        return Result(skipped=f"image {image_name} not built (`orch image build` or `python -m orch.container.image`)")
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
    tries = []
    for _ in range(cfg.repeat):
        for n in sizes:
            tries.append(up_once(ctx.env, client, n))
    for n in sizes:
        mine = [t for t in tries if t["workers"] == n]
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


def up_once(env: BenchEnv, client: Any, workers: int) -> dict[str, Any]:
    name = env.name(f"ctr{workers}")
    workdir = env.workdir(name)
    if os.geteuid() == 0:  # the container's workers run as uid 1000 then, and must be able to write it
        os.chown(workdir, CONTAINER_UID, CONTAINER_UID)
    argv = orch_cli("up", name, "-n", str(workers), "--workdir", str(workdir), "--offline")
    started = time.time()
    t0 = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, env=python_env(), check=False, timeout=UP_TIMEOUT)
        up_s = time.monotonic() - t0
        if done.returncode != 0:
            raise BenchError(f"orch up (container) exited {done.returncode}: {_tail(done.stderr)}")
        spawned = _first_spawn(RunFolder.for_name(name))
    finally:
        subprocess.run(orch_cli("kill", name), capture_output=True, env=python_env(), check=False, timeout=120)
        with contextlib.suppress(Exception):  # only ours: the label carries our unique run name
            for leftover in client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={name}"}):
                leftover.remove(force=True)
    return {
        "workers": workers,
        "up_s": up_s,
        "controller_start_s": spawned - started if spawned is not None else None,
    }


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

"""The swarm backend (issue 33), on the three-engine swarm of scripts/swarm-cluster.sh, side by side in one run:
a swarm run's start against a container run's on this machine's engine, eight runs on one node against two,
and the sync: how soon a file written in a run's task is in the user's copy, and what a pass costs.

Runs only as root with the swarm up (`sudo scripts/swarm-cluster.sh up`) and the swarm tests' image loaded
(tests/swarmtest.py builds and loads it); otherwise it says which is missing. Every run is an offline scripted
fleet of one strict worker with `--egress none`, so only the backends differ.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker

from bench.core import Context, Result
from bench.env import REPO, BenchEnv
from bench.pairs import paired, ratios
from bench.table import Row
from orch.backends.docker.backend import DockerSettings
from orch.backends.docker.sandbox import DockerSandbox
from orch.backends.swarm.backend import SwarmSettings
from orch.backends.swarm.passes import make_pass
from orch.backends.swarm.receive import apply_pass
from orch.backends.swarm.record import SwarmRunInfo
from orch.backends.swarm.sandbox import SwarmSandbox
from orch.contracts import UpRequest
from orch.errors import OrchError
from orch.run.folder import RunFolder
from orch.run.records import ContainerOptions, EgressMode, Isolation, RunInfo
from orch.settings.user import IMAGE, SWARM_SYNC_INTERVAL
from orch.waits import wait_until

SCRIPT = REPO / "scripts" / "swarm-cluster.sh"
MANAGER = "unix:///run/orch-sw/mgr/docker.sock"
OPTIONS = ContainerOptions(egress=EgressMode.NONE)
MANY = 8
MIB = 1 << 20


def run(ctx: Context) -> Result:
    if not _swarm_up():
        return Result(skipped="no swarm of three engines here: sudo scripts/swarm-cluster.sh up")
    repo, sep, tag = IMAGE.get().rpartition(":")
    image = f"{repo}-swarm:{tag}" if sep else f"{IMAGE.get()}-swarm"  # tests/swarmtest.py's swarm_image
    try:
        with _manager():
            SwarmSandbox().client().images.get(image)
    except Exception as exc:
        return Result(skipped=f"image {image} not on the swarm's manager ({exc}): run the swarm tests once")
    env, repeat = ctx.env, ctx.config.repeat
    raw: dict[str, Any] = {"image": image}
    rows: list[Row] = []
    swarm_s, container_s = paired(repeat, lambda kind: _start(env, image, kind), "swarm", "container")
    rows += [
        Row("swarm", "a run's start to its workers running: swarm", "s", swarm_s),
        Row("swarm", "the same on this machine's engine: container", "s", container_s),
        Row("swarm", "start: swarm / container", "x", ratios(swarm_s, container_s),
            note="the collector, the restore from it, a node's task; the same init and fleet"),
    ]  # fmt: skip
    if not ctx.config.quick:
        one, two = paired(1, lambda spread: _many(env, image, spread), "one", "two")
        rows += [
            Row("swarm", f"{MANY} runs to running, all on one node", "s", one),
            Row("swarm", f"{MANY} runs to running, spread over two nodes", "s", two),
            Row("swarm", "eight runs: two nodes / one", "x", ratios(two, one)),
        ]
    delays = _delays(env, image, repeat * 3)
    rows.append(
        Row("swarm", "a file written in the task, to the user's copy", "s", delays,
            note=f"a pass every {SWARM_SYNC_INTERVAL.get():g} s, then pulled through the manager")
    )  # fmt: skip
    rows += _pass_costs(repeat)
    raw.update(swarm_start_s=swarm_s, container_start_s=container_s, sync_delay_s=delays)
    return Result(rows=rows, raw=raw)


def _swarm_up() -> bool:
    if os.geteuid() != 0:
        return False
    try:
        return subprocess.run([str(SCRIPT), "status"], capture_output=True, check=False).returncode == 0
    except OSError:
        return False


@contextlib.contextmanager
def _manager() -> Iterator[None]:
    """DOCKER_HOST names the swarm's manager for the block."""
    saved = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = MANAGER
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = saved


def _request(env: BenchEnv, prefix: str) -> UpRequest:
    name = env.name(prefix)
    workdir = env.workdir(name)
    os.chown(workdir, 1000, 1000)  # the container run's workers (uid 1000 under root) read it
    return UpRequest(name, 1, "scripted", workdir, "default", offline=True, isolation=Isolation.STRICT)


def _start(env: BenchEnv, image: str, kind: str) -> float:
    request = _request(env, f"sw-{kind}")
    t0 = time.monotonic()
    if kind == "swarm":
        with _manager():
            box = SwarmSandbox(
                SwarmSettings(image=image, options=OPTIONS, boot_timeout=120, constraints=["node.role==worker"])
            )
            info = box.up(request)
            took = time.monotonic() - t0
            box.kill(info)
        return took
    docker_box = DockerSandbox(DockerSettings(image=image, options=OPTIONS, boot_timeout=120))
    info = docker_box.up(request)
    took = time.monotonic() - t0
    docker_box.kill(info)
    return took


def _many(env: BenchEnv, image: str, spread: str) -> float:
    constraints = ["node.labels.orch.node==w1"] if spread == "one" else ["node.role==worker"]
    requests = [_request(env, f"sw-many-{spread}") for _ in range(MANY)]
    with _manager():
        box = SwarmSandbox(SwarmSettings(image=image, options=OPTIONS, boot_timeout=300, constraints=constraints))
        t0 = time.monotonic()
        started = _up_side_by_side(box.settings, requests)
        took = time.monotonic() - t0
        for info in started:
            if not isinstance(info, OrchError):
                with contextlib.suppress(OrchError):
                    box.kill(info)
    failed = [str(info) for info in started if isinstance(info, OrchError)]
    if failed:
        raise OrchError(f"{len(failed)} of {MANY} runs did not start: {failed[0]}")
    return took


def _up_side_by_side(settings: SwarmSettings, requests: list[UpRequest]) -> list[RunInfo | OrchError]:
    """The runs started as `orch run SPEC --repo ...` starts them on a swarm: side by side, four made at a time,
    each placed by Swarm as it starts (the sandbox's placing lock keeps a per-node cap exact)."""

    def one(request: UpRequest) -> RunInfo | OrchError:
        try:
            return SwarmSandbox(settings).up(request)
        except OrchError as exc:
            return exc

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        return list(pool.map(one, requests))


def _delays(env: BenchEnv, image: str, samples: int) -> list[float]:
    """A marker written in the run's folder inside its task (through its node's engine), until the user's
    copy has it."""
    request = _request(env, "sw-sync")
    delays = []
    with _manager():
        box = SwarmSandbox(
            SwarmSettings(image=image, options=OPTIONS, boot_timeout=120, constraints=["node.labels.orch.node==w1"])
        )
        info: RunInfo = box.up(request)
        try:
            node = docker.DockerClient(base_url="unix:///run/orch-sw/w1/docker.sock")
            (task,) = node.containers.list(filters={"label": f"orch.run={request.name}"})
            run = RunFolder.for_name(request.name)
            for n in range(samples):
                marker = f"/orch/runs/{request.name}/logs/bench-{n}"
                t0 = time.monotonic()
                task.exec_run(["touch", marker], user="1000")
                assert isinstance(info, SwarmRunInfo)

                def arrived(n: int = n) -> bool:
                    nonlocal info
                    assert isinstance(info, SwarmRunInfo)
                    info = box.pull_info(info)
                    return (run.logs_dir / f"bench-{n}").exists()

                wait_until(arrived, 60, "a marker to come home", interval=0.1)
                delays.append(time.monotonic() - t0)
        finally:
            box.kill(info)
    return delays


def _pass_costs(repeat: int) -> list[Row]:
    """A pass's cost on a run folder of 400 files (3.7 MiB, a 1 MiB events.jsonl among them), here: an idle
    pass (nothing changed: the walk alone), a pass after one event (its tail only), and the first pass whole."""
    idle, tail, tail_bytes, first, first_bytes, applied = [], [], [], [], [], []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            root = _folder(Path(tmp) / "run")
            t0 = time.monotonic()
            body, base, _ = make_pass(root, {}, 1)
            first.append(time.monotonic() - t0)
            first_bytes.append(body.seek(0, os.SEEK_END) / MIB)
            body.seek(0)
            t0 = time.monotonic()
            apply_pass(Path(tmp) / "copy", body)
            applied.append(time.monotonic() - t0)
            t0 = time.monotonic()
            make_pass(root, base, 1)
            idle.append(time.monotonic() - t0)
            with (root / "events.jsonl").open("a") as f:
                f.write('{"event": "spawned", "worker": 1}\n')
            t0 = time.monotonic()
            body, _, _ = make_pass(root, base, 1)
            tail.append(time.monotonic() - t0)
            tail_bytes.append(float(body.seek(0, os.SEEK_END)))
    return [
        Row("swarm", "a pass over an unchanged run folder (400 files)", "ms", [s * 1000 for s in idle]),
        Row("swarm", "a pass after one event appended", "ms", [s * 1000 for s in tail]),
        Row("swarm", "its size (the tail and the tar around it)", "B", tail_bytes),
        Row("swarm", "the first pass of that folder, whole", "ms", [s * 1000 for s in first]),
        Row("swarm", "its size", "MiB", first_bytes),
        Row("swarm", "applying it to an empty copy", "ms", [s * 1000 for s in applied]),
    ]


def _folder(root: Path) -> Path:
    for n in range(399):
        path = root / f"dir-{n % 20}" / f"file-{n}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(7 << 10))  # 399 x 7 KiB, about 2.7 MiB
    (root / "events.jsonl").write_bytes(b'{"event": "x"}\n' * (1 << 16))  # 1 MiB
    return root

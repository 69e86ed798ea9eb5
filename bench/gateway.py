"""The model gateway's cost, side by side in one run: the same requests straight to the scripted model
server and through the gateway (kind api, pointed at that server): latency p50/p99, time to the first
streamed byte, 64 concurrent streams, and the gateway's memory (supervisor + server child). Then record
and replay: the offline demo (`orch demo --local`, real Claude Code workers) against its replay (`orch
run --replay`, the gateway answering from the recording) and its replay from the exported file (`orch record
export`, a fresh ORCH_HOME), wall time side by side and their ratios."""

from __future__ import annotations

import asyncio
import json
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from pydantic import SecretStr

from bench.core import Context, Result
from bench.env import BenchError, orch_cli, python_env, stop
from bench.pairs import ratios
from bench.procs import tree_memory
from bench.table import Row, Target, percentile
from orch.agents.claude import CREDENTIAL_ENV
from orch.entry.demo import DEMO_NAME
from orch.gateway.modeldir import GatewayBoot, Scheme, Upstream
from orch.gateway.process import GatewayClient, start_gateway, stop_gateway
from orch.run.folder import RunFolder
from orch.run.paths import orch_home
from orch.settings.user import HOME
from orch.waits import wait_for_paths

CONCURRENT = 64
BODY: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 100,
    "stream": True,
    "tools": [{"name": "Bash", "description": "run", "input_schema": {"type": "object"}}],
    "messages": [{"role": "user", "content": "benchmark turn " + "x" * 2000}],
}
RAW = json.dumps(BODY).encode()
HEADERS = {"x-api-key": "bench", "content-type": "application/json", "anthropic-version": "2023-06-01"}


def _upstream(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    url_file = folder / "upstream.url"
    proc = subprocess.Popen(
        [sys.executable, "-m", "orch.offline.modelserver", "--url-file", str(url_file)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    if wait_for_paths([url_file], 30):
        stop(proc)
        raise BenchError("the scripted model server did not start")
    return proc, url_file.read_text().strip()


async def _one(session: aiohttp.ClientSession, url: str) -> tuple[float, float]:
    """(time to the first body byte, total) in ms for one streamed turn."""
    start = time.perf_counter()
    # Pre-encoded bytes, as Claude Code and the gateway send them: `json=` makes aiohttp write headers and
    # body apart, and the server's delayed ACK then adds ~40 ms to the direct path only.
    async with session.post(url + "/v1/messages", data=RAW, headers=HEADERS) as response:
        first = None
        async for _ in response.content.iter_any():
            first = first if first is not None else time.perf_counter()
        if response.status != 200:
            raise BenchError(f"{url}: HTTP {response.status}")
    end = time.perf_counter()
    return ((first or end) - start) * 1000, (end - start) * 1000


async def _measure(direct: str, gateway: str, samples: int) -> dict[str, Any]:
    # Kept-alive connections, as Claude Code uses. (The scripted server used to show a steady ~40 ms here:
    # Nagle held its body for the client's delayed ACK; it sets TCP_NODELAY now.)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        for url in (direct, gateway):  # warm both connection pools
            await _one(session, url)
        lat: dict[str, list[float]] = {"direct": [], "gateway": []}
        ttfb: dict[str, list[float]] = {"direct": [], "gateway": []}
        for _ in range(samples):  # interleaved, so drift on a busy machine hits both alike
            for name, url in (("direct", direct), ("gateway", gateway)):
                first, total = await _one(session, url)
                ttfb[name].append(first)
                lat[name].append(total)
        started = time.perf_counter()
        results = await asyncio.gather(*(_one(session, gateway) for _ in range(CONCURRENT)), return_exceptions=True)
        wall = (time.perf_counter() - started) * 1000
    failures = sum(1 for r in results if isinstance(r, BaseException))
    return {"latency_ms": lat, "ttfb_ms": ttfb, "concurrent_wall_ms": wall, "concurrent_failures": failures}


DEMO_TIMEOUT = 600.0


def _orch(*args: str, home: Path | None = None) -> float:
    """Wall seconds of one `orch` command (the offline demo's own model server, none of the bench's);
    `home`: another ORCH_HOME (a fresh one, as on another machine)."""
    env = {k: v for k, v in python_env().items() if k not in {*CREDENTIAL_ENV, "ANTHROPIC_BASE_URL"}}
    if home is not None:
        env[HOME.name] = str(home)
    start = time.monotonic()
    done = subprocess.run(orch_cli(*args), env=env, capture_output=True, timeout=DEMO_TIMEOUT, check=False)
    seconds = time.monotonic() - start
    if done.returncode not in (0, 4):  # the demo's refuted finding makes `orch run` exit 4 (EXIT_CODES)
        tail = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()[-1:]
        raise BenchError(f"orch {' '.join(args[:2])} exited {done.returncode}: {' '.join(tail)[:200]}")
    return seconds


def _verdicts(name: str, home: Path | None = None) -> dict[str, str]:
    root = (home / "runs" / name) if home is not None else RunFolder.for_name(name).root
    report = json.loads(RunFolder(root).report_json.read_text())
    return {f["id"]: f["status"] for f in report["findings"]}


def _replay_rows(ctx: Context) -> tuple[list[Row], dict[str, Any]]:
    """The offline demo live, then replayed from its own run folder, then exported (`orch record export`)
    and replayed from that file in a fresh ORCH_HOME (as CI does); `repeat` triples."""
    if missing := ctx.env.claude_missing():
        return [Row("gateway", "replayed demo / live demo", "", status="SKIPPED", note=missing)], {}
    live_s: list[float] = []
    replay_s: list[float] = []
    export_s: list[float] = []
    file_s: list[float] = []
    sizes: list[float] = []
    for i in range(ctx.config.repeat):
        name = f"{DEMO_NAME}-bench-{i}"
        live_s.append(_orch("demo", "--local", "--name", name))
        spec = orch_home() / "demo" / name / "fleet.yaml"
        replay_s.append(_orch("run", str(spec), "--local", "--replay", name, "--name", f"{name}-replay", "--quiet"))
        if _verdicts(name) != _verdicts(f"{name}-replay"):
            raise BenchError(f"the replay of {name} did not reach the recorded verdicts")
        exported = orch_home() / f"{name}.orchrec.gz"
        export_s.append(_orch("record", "export", name, "-o", str(exported)))
        sizes.append(exported.stat().st_size / 1024)
        fresh = orch_home() / f"fresh-{i}"  # a fresh ORCH_HOME: nothing of the recorded run but the file
        file_s.append(
            _orch("run", str(spec), "--local", "--replay", str(exported), "--name", "ci", "--quiet", home=fresh)
        )
        if _verdicts(name) != _verdicts("ci", fresh):
            raise BenchError(f"the replay of {name} from {exported.name} did not reach the recorded verdicts")
    note = "orch demo --local vs orch run --replay of it, 3 Claude Code workers each"
    rows = [
        Row("gateway", "offline demo, live (scripted model), wall", "s", live_s, note=note),
        Row("gateway", "offline demo, replayed from its recording, wall", "s", replay_s),
        Row("gateway", "replayed demo / live demo", "x", ratios(replay_s, live_s), Target("<=", 1.0, "<= 1x (faster)")),
        Row("gateway", "`orch record export` of the demo, wall", "s", export_s),
        Row("gateway", "exported recording of the demo, size", "KiB", sizes),
        Row(
            "gateway",
            "offline demo, replayed from the exported file, wall",
            "s",
            file_s,
            note="orch run --replay FILE in a fresh ORCH_HOME",
        ),
        Row(
            "gateway",
            "replayed from the file / live demo",
            "x",
            ratios(file_s, live_s),
            Target("<=", 1.0, "<= 1x (faster)"),
        ),
    ]
    raw = {"demo_live_s": live_s, "demo_replay_s": replay_s, "export_s": export_s, "export_kib": sizes}
    return rows, {**raw, "demo_replay_file_s": file_s}


def run(ctx: Context) -> Result:
    samples = 30 if ctx.config.quick else 300
    run_folder = ctx.env.file_run("gateway")
    upstream, upstream_url = _upstream(run_folder.root)
    handle_file = run_folder.root / "gateway.handle.json"
    try:
        boot = GatewayBoot(
            run=run_folder.name,
            run_dir=str(run_folder.root),
            upstreams=[Upstream(kind="api", url=upstream_url, scheme=Scheme.API_KEY, secret=SecretStr("bench"))],
            control_key=SecretStr(secrets.token_hex(16)),
            offline=True,
        )
        handle = start_gateway(boot, handle_file, run_folder.root / "gateway.log")
        token = GatewayClient(handle).mint_token(1)
        raw = asyncio.run(_measure(upstream_url, f"{handle.url}/t/{token}", samples))
        memory = tree_memory(handle.pid)
    finally:
        stop_gateway(handle_file)
        stop(upstream)
    lat, ttfb = raw["latency_ms"], raw["ttfb_ms"]

    def pct(values: list[float], p: float) -> float:
        return percentile(values, p)

    added = [g - d for g, d in zip(lat["gateway"], lat["direct"], strict=True)]
    added_ttfb = [g - d for g, d in zip(ttfb["gateway"], ttfb["direct"], strict=True)]
    n = f"{samples} streamed turns each"
    rows = [
        Row("gateway", "latency direct, p50", "ms", [pct(lat["direct"], 50)], note=n),
        Row("gateway", "latency through the gateway, p50", "ms", [pct(lat["gateway"], 50)], note=n),
        Row("gateway", "latency direct, p99", "ms", [pct(lat["direct"], 99)]),
        Row("gateway", "latency through the gateway, p99", "ms", [pct(lat["gateway"], 99)]),
        Row(
            "gateway", "added latency per request, p50", "ms", [statistics.median(added)], Target("<=", 2.0, "<= 2 ms")
        ),
        Row("gateway", "added latency per request, p99", "ms", [pct(lat["gateway"], 99) - pct(lat["direct"], 99)]),
        Row(
            "gateway",
            "added time to first byte, p50",
            "ms",
            [statistics.median(added_ttfb)],
            Target("<=", 5.0, "<= 5 ms"),
        ),
        Row("gateway", f"{CONCURRENT} concurrent streams, wall", "ms", [raw["concurrent_wall_ms"]]),
        Row(
            "gateway",
            f"{CONCURRENT} concurrent streams, failed",
            "count",
            [raw["concurrent_failures"]],
            Target("==", 0, "0"),
        ),
        Row(
            "gateway",
            "gateway RSS (supervisor + server child)",
            "MiB",
            [memory.rss / 2**20],
            note=f"{memory.processes} processes, after {2 * samples + CONCURRENT + 2} requests",
        ),
    ]
    replay_rows, replay_raw = _replay_rows(ctx)
    return Result(rows=rows + replay_rows, raw={**raw, "rss_bytes": memory.rss, "pss_bytes": memory.pss, **replay_raw})

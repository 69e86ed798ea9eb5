"""The model gateway's cost, side by side in one run: the same requests straight to the scripted model
server and through the gateway (kind api, pointed at that server): latency p50/p99, time to the first
streamed byte, 64 concurrent streams, and the gateway's memory (supervisor + server child)."""

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
from bench.env import BenchError, stop
from bench.procs import tree_memory
from bench.report import Row, Target, percentile
from orch.gateway.process import GatewayClient, start_gateway, stop_gateway
from orch.gateway.records import GatewayBoot, Scheme, Upstream
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


def run(ctx: Context) -> Result:
    samples = 30 if ctx.config.quick else 300
    run_folder = ctx.env.file_run("gateway")
    upstream, upstream_url = _upstream(run_folder.root)
    handle_file = run_folder.root / "gateway.handle.json"
    try:
        boot = GatewayBoot(
            run=run_folder.name,
            run_dir=str(run_folder.root),
            upstream=Upstream(kind="api", url=upstream_url, scheme=Scheme.API_KEY, secret=SecretStr("bench")),
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
    return Result(rows=rows, raw={**raw, "rss_bytes": memory.rss, "pss_bytes": memory.pss})

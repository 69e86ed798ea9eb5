"""Local strict isolation against local shared, side by side in one run: `up` -> every worker ready (N=1
and N=4) and brief -> done for one worker, with real Claude Code, offline (the run's gateway and its
scripted model), as the agents benchmark measures them. Each repeat runs shared then strict under the
same load; the ratio rows pair them repeat by repeat. Strict puts each worker in its own bubblewrap
sandbox (orch.backends.local.bwrap) with its portal to the gateway, and starts the run's relay
(orch.backends.local.relay).
Without bubblewrap or user namespaces the strict rows are SKIPPED with the reason.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

from bench.agents import MEASUREMENT_ERRORS, WORKERS, _one_line, brief_to_done
from bench.core import Context, Result
from bench.env import BOOT_TIMEOUT, BenchEnv, Fleet
from bench.pairs import in_turn, ratios
from bench.table import Row, Target
from orch import prereqs
from orch.backends.local.backend import LocalSettings
from orch.backends.local.sandbox import LocalSandbox
from orch.contracts import UpRequest
from orch.errors import UsageError
from orch.run.folder import RunFolder
from orch.run.records import Isolation

AGENT = "claude"
MODES = (Isolation.SHARED, Isolation.STRICT)
LIMIT = Target("<=", 1.10, "<= 1.10x")


@dataclass
class Samples:
    ups: dict[int, dict[int, float]] = field(default_factory=lambda: {n: {} for n in WORKERS})
    done: dict[int, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def _up(env: BenchEnv, mode: Isolation, workers: int) -> Fleet:
    name = env.name(f"iso-{mode.value}")
    req = UpRequest(name=name, workers=workers, agent=AGENT, workdir=env.workdir(name), offline=True, isolation=mode)
    start = time.monotonic()
    info = LocalSandbox(LocalSettings(boot_timeout=BOOT_TIMEOUT)).up(req)
    live = Fleet(RunFolder.for_name(name), info, time.monotonic() - start)
    env.live.append(live)
    return live


def _sample(env: BenchEnv, mode: Isolation, repeat: int, got: Samples) -> None:
    for n in WORKERS:
        try:
            live = _up(env, mode, n)
        except MEASUREMENT_ERRORS as exc:
            got.errors.append(f"up N={n}: {_one_line(exc)}")
            return
        try:
            got.ups[n][repeat] = live.up_seconds
            if n == 1:
                got.done[repeat] = brief_to_done(live)[0]
        except MEASUREMENT_ERRORS as exc:
            got.errors.append(f"N={n}: {_one_line(exc)}")
        finally:
            env.kill(live)


def run(ctx: Context) -> Result:
    try:
        prereqs.bwrap_works()
    except UsageError as exc:
        return Result(rows=[Row("isolation", "local strict", "", status="SKIPPED", note=exc.one_line())], raw={})
    got = {mode: Samples() for mode in MODES}
    for repeat in range(ctx.config.repeat):  # shared and strict in turn: the same load for both
        for mode in in_turn(repeat, *MODES):
            _sample(ctx.env, mode, repeat, got[mode])
    rows: list[Row] = []
    for mode in MODES:
        mine = got[mode]
        rows += [Row("isolation", f"{mode.value}: up -> {n} ready", "s", list(mine.ups[n].values())) for n in WORKERS]
        rows.append(Row("isolation", f"{mode.value}: brief -> done (3 tool calls)", "s", list(mine.done.values())))
    strict, shared = got[Isolation.STRICT], got[Isolation.SHARED]
    for n in WORKERS:
        ups = ratios(strict.ups[n], shared.ups[n])
        rows.append(Row("isolation", f"strict / shared: up -> {n} ready", "x", ups, target=LIMIT))
    done = ratios(strict.done, shared.done)
    rows.append(Row("isolation", "strict / shared: brief -> done", "x", done, target=LIMIT))
    for row in rows:
        if not row.values:
            errors = strict.errors + shared.errors
            row.status, row.note = "ERROR", "; ".join(errors)[:300] or "no sample"
    return Result(rows=rows, raw={mode.value: dataclasses.asdict(s) for mode, s in got.items()})

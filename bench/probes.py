"""Helper processes the benchmarks drive over stdin/stdout, one command per line, monotonic timestamps.

    python -m bench.probes writer                 # "flag PATH" | "bus RUN SEQ" -> prints t_ns just before
    python -m bench.probes waiter RUN             # "wait N" -> control.wait(...), prints t_ns when it returned
    python -m bench.probes poller RUN INTERVAL SECONDS   # control.status every INTERVAL: prints CPU as JSON
    python -m bench.probes buswriter RUN ID COUNT [file|socket] # after "go": COUNT bus posts, prints first/last t_ns

time.monotonic_ns() is CLOCK_MONOTONIC, one clock for every process on the machine, so a timestamp taken
in one helper can be subtracted from one taken in another.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time

from orch.errors import WaitTimeoutError
from orch.fleet import control
from orch.run import bus
from orch.run.folder import RunFolder

MAX_COMMANDS = 1_000_000
PAYLOAD_MAX = 2000


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def writer() -> None:
    for _, line in zip(range(MAX_COMMANDS), sys.stdin, strict=False):
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "flag":
            t = time.monotonic_ns()
            os.close(os.open(parts[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            _out(str(t))
        elif parts[0] == "bus":
            run = RunFolder.for_name(parts[1])
            t = time.monotonic_ns()
            bus.post(run, 1, f"sample {parts[2]}")
            _out(str(t))


def waiter(name: str) -> None:
    run = RunFolder.for_name(name)
    for _, line in zip(range(MAX_COMMANDS), sys.stdin, strict=False):
        parts = line.split()
        if len(parts) == 2 and parts[0] == "wait":
            try:
                control.wait(run, [int(parts[1])], 30.0)
            except WaitTimeoutError:
                _out("timeout")
                continue
            _out(str(time.monotonic_ns()))


def _cpu() -> dict[str, float]:
    t = os.times()
    return {"own": t.user + t.system, "children": t.children_user + t.children_system}


def poller(name: str, interval: float, seconds: float) -> None:
    """What a controller's monitoring loop does: `status` (tmux list-panes + hook files) every interval."""
    run = RunFolder.for_name(name)
    control.status(run)  # warm: imports and first tmux call are startup, not steady state
    warm, t_warm = _cpu(), time.monotonic_ns()
    _out(json.dumps({"warm": True}))
    stop = threading.Event()
    polls = 0
    deadline = time.monotonic() + seconds
    max_polls = int(seconds / interval) + 2
    next_at = time.monotonic() + interval
    while polls < max_polls:
        remaining = min(next_at, deadline) - time.monotonic()
        if remaining > 0:
            stop.wait(remaining)  # the controller's cadence: the workload, not a synchronisation
        if time.monotonic() >= deadline:
            break
        control.status(run)
        polls += 1
        next_at += interval
    end, t_end = _cpu(), time.monotonic_ns()
    cpu = end["own"] + end["children"] - warm["own"] - warm["children"]
    _out(json.dumps({"cpu_s": cpu, "wall_s": (t_end - t_warm) / 1e9, "polls": polls}))


def payload(writer_id: int, seq: int) -> str:
    """The text writer `writer_id` posts as its `seq`-th line: deterministic, of varied length."""
    rng = random.Random(writer_id * 1_000_003 + seq)
    body = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789 ") for _ in range(rng.randint(1, PAYLOAD_MAX)))
    return f"w{writer_id} {seq} {body.strip() or 'x'}"


def buswriter(name: str, writer_id: int, count: int, through: str = "file") -> None:
    """`through`: `file` appends under the lock (shared isolation), `socket` posts through the controller's
    bus server (strict isolation); each post's latency is reported too."""
    run = RunFolder.for_name(name)
    texts = [payload(writer_id, seq) for seq in range(count)]
    post = bus.post_through_controller if through == "socket" else bus.post
    sys.stdin.readline()  # "go": every writer starts together
    first = time.monotonic_ns()
    latencies = []
    for text in texts:
        start = time.monotonic_ns()
        post(run, writer_id, text)
        latencies.append((time.monotonic_ns() - start) / 1e6)
    last = time.monotonic_ns()
    _out(json.dumps({"first_ns": first, "last_ns": last, "latency_ms": latencies}))


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    command, args = argv[0], argv[1:]
    if command == "writer":
        writer()
    elif command == "waiter":
        waiter(args[0])
    elif command == "poller":
        poller(args[0], float(args[1]), float(args[2]))
    elif command == "buswriter":
        buswriter(args[0], int(args[1]), int(args[2]), *args[3:4])
    else:
        print(f"unknown probe {command!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

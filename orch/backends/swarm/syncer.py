"""A swarm run's side of coming home: its folder restored from the collector before the run starts, then a
pass pushed to the collector every ORCH_SWARM_SYNC_INTERVAL seconds while it runs, and a last one when the run
ends (orch.backends.swarm.collector).

    python -m orch.backends.swarm.syncer restore NAME    (the task's first step, as the run's uid)
    python -m orch.backends.swarm.syncer run NAME -- CMD  (the run itself, under the init: see below)

`run` is what the container's init execs as the run's uid (orch.container.init, ORCH_SWARM_COLLECTOR set): it
keeps CAP_DAC_READ_SEARCH, and nothing else of its own, to read the files other uids own in the run folder
(the gateway's `model/`, each worker's outbox and session store), starts CMD (`orch serve-run ...`) without
it, and outlives it to push the last pass. It never opens a path through a link (orch.backends.swarm.passes),
so a worker's planted link cannot point it at a file outside the folder; no worker can signal or trace it
(another uid, and a capability they lack). The token for the collector is a secret of this life that the run's
uid alone reads; a push the collector refuses as not of its life means a newer life runs elsewhere: this one
stops its run.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from types import FrameType
from typing import IO

from orch.backends.swarm.names import SYNC_SECRET
from orch.backends.swarm.passes import Baseline, PassError, Seen, baseline_of, make_pass
from orch.backends.swarm.receive import apply_pass
from orch.container.layout import WORKDIR, run_mount
from orch.errors import WaitTimeoutError
from orch.run.folder import RunFolder, validate_name
from orch.run.uids import READ_ALL
from orch.settings.internal import SWARM_COLLECTOR, SWARM_LIFE
from orch.settings.user import SWARM_SYNC_INTERVAL
from orch.waits import wait_until

BASELINE = Path("/tmp/orch-sync/baseline.json")
"""What the collector has, from the restore to the run's first pass (in a folder of the run's uid's, 0700)."""
TIMEOUT = 30.0
"""Seconds one request to the collector may take."""
LAST_PASS_TIMEOUT = 60.0
"""Seconds the last pass may take to get through once the run ended."""


class Fenced(Exception):
    """The collector takes passes from a newer life of the run."""


class Link:
    """The collector, as this life reaches it."""

    def __init__(self, target: str, token: str, life: int) -> None:
        host, _, port = target.rpartition(":")
        self.host, self.port, self.token, self.life = host, int(port), token, life

    @classmethod
    def from_settings(cls) -> Link:
        target = SWARM_COLLECTOR.get()
        if not target:
            raise SystemExit(f"orch-sync: {SWARM_COLLECTOR.name} is not set")
        token = Path(f"/run/secrets/{SYNC_SECRET}").read_text().strip()
        return cls(target, token, SWARM_LIFE.get())

    def request(self, method: str, path: str, body: IO[bytes] | None = None) -> http.client.HTTPResponse:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=TIMEOUT)
        headers = {"Authorization": f"Bearer {self.token}"}
        if body is not None:
            headers["Content-Length"] = str(body.seek(0, os.SEEK_END))
            body.seek(0)
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        if response.status == 401:
            raise Fenced(f"the collector refused life {self.life}: a newer life of the run took over")
        return response

    def fetch(self, path: str, into: Path) -> None:
        """A whole folder (`/run`, `/workspace`) from the collector, applied to `into`."""
        response = self.request("GET", path)
        if response.status != 200:
            raise OSError(f"GET {path}: {response.status} {response.read(300)!r}")
        with _spooled(response) as body:
            apply_pass(into, body)

    def push(self, body: IO[bytes]) -> list[str]:
        """One pass; the paths the collector wants whole next time (their tail did not continue its copy)."""
        response = self.request("POST", "/push", body)
        answer = json.loads(response.read() or b"{}")
        if response.status != 200:
            raise OSError(f"push: {response.status} {answer.get('error', '')}")
        return [str(p) for p in answer.get("stale", [])]

    def end(self, code: int) -> None:
        self.request("POST", f"/end?code={code}").read()


def _spooled(response: http.client.HTTPResponse) -> IO[bytes]:
    out = tempfile.SpooledTemporaryFile(max_size=8 << 20)  # noqa: SIM115 (the caller's `with`)
    while chunk := response.read(1 << 20):
        out.write(chunk)
    out.seek(0)
    return out


def save_baseline(baseline: Baseline, path: Path = BASELINE) -> None:
    path.parent.mkdir(mode=0o700, exist_ok=True)
    path.write_text(json.dumps({rel: asdict(seen) for rel, seen in baseline.items()}))


def load_baseline(path: Path = BASELINE) -> Baseline:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {rel: Seen(**fields) for rel, fields in data.items()}


def restore(link: Link, run: Path, workspace: Path) -> Baseline:
    """The run folder and the workspace, as the collector has them, into this task's (empty) volumes; the
    baseline of what the run folder now has, for the run's first pass."""
    link.fetch("/run", run)
    link.fetch("/workspace", workspace)
    return baseline_of(run)


class Pusher:
    """The passes of one run folder to its collector, each built from what the collector took last."""

    def __init__(self, run: RunFolder, link: Link, baseline: Baseline) -> None:
        self.run, self.link, self.baseline = run, link, baseline
        root = run.root
        self.first = [str(p.relative_to(root)) for p in (run.controller_state, run.run_json, run.repo_dir / "refs")]
        self.first += [str(run.repo_dir.relative_to(root) / name) for name in ("HEAD", "packed-refs")]

    def once(self) -> bool:
        """Push what changed (nothing when nothing did); whether the collector has it all now."""
        body, taken, count = make_pass(self.run.root, self.baseline, self.link.life, first=self.first)
        with body:
            if count == 0:
                return True
            try:
                stale = self.link.push(body)
            except (OSError, PassError, http.client.HTTPException):
                return False  # the same changes, and more, go in the next pass
        for rel in stale:
            taken.pop(rel, None)
        self.baseline = taken
        return not stale


def run(folder: RunFolder, link: Link, baseline: Baseline, command: list[str], interval: float) -> int:
    """CMD as a child without this process's read-everything capability; a pass every interval while it
    runs; the last pass and the end once it exited (or it was stopped because a newer life runs)."""
    pusher = Pusher(folder, link, baseline)
    child = subprocess.Popen([*_without_read_all(), *command])

    def forward(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    try:
        while True:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=interval)
            if child.returncode is not None:
                break
            pusher.once()
    except Fenced as exc:
        print(f"orch-sync: {exc}; stopping this one", file=sys.stderr, flush=True)
        child.terminate()
        return child.wait()
    code = child.returncode
    with contextlib.suppress(Fenced, WaitTimeoutError, OSError, http.client.HTTPException):
        wait_until(pusher.once, LAST_PASS_TIMEOUT, "the run's last pass to reach its collector", interval=1.0)
        link.end(code)
    return code


def _without_read_all() -> list[str]:
    """setpriv dropping CAP_DAC_READ_SEARCH (kept by this process alone) from what its child inherits."""
    drop = f"-{READ_ALL}"
    argv = ["setpriv", f"--inh-caps={drop}", f"--ambient-caps={drop}"]
    status = Path("/proc/self/status").read_text()
    effective = int(next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff:")), 16)
    if effective >> 8 & 1:  # CAP_SETPCAP (strict isolation keeps it): the bounding set too
        argv.append(f"--bounding-set={drop}")
    return [*argv, "--"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orch.backends.swarm.syncer")
    parser.add_argument("action", choices=["restore", "run"])
    parser.add_argument("name")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    root = Path(run_mount(validate_name(args.name)))
    if args.action == "restore":
        save_baseline(restore(Link.from_settings(), root, Path(WORKDIR)))
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("run needs the command after --")
    interval = SWARM_SYNC_INTERVAL.get()
    return run(RunFolder(root), Link.from_settings(), load_baseline(), command, interval)


if __name__ == "__main__":
    sys.exit(main())

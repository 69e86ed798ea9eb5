"""compose.yaml's runs, as the container's init prepares them while it is still root (compose has no
orch on the host to make the run folder first, as `orch up` and `orch run` do).

- `fleet` (`orch serve-run NAME --create`): the run folder made from the ORCH_* settings
  (`create_fleet_run`), strict where its agent can be, before the workers' files are given to them.
- `lead` (`python -m orch.container.init --lead SPEC`, or `--lead --resume`): the spec checked and the run
  made by `orch run SPEC --prepare` as the run's uid with no capability (`prepare_lead`: the init parses no
  spec as root), a previous run of the name cleared first (a re-run starts clean: its own `model/`, its
  own workers' files); then, like a container the host started, each worker gets its files and
  `orch serve-run NAME --drive` launches the fleet with the capabilities that start each pane as its worker
  and runs the controller (`orch run --resume NAME`) as a child with none (`lead_command`).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from orch.container.bootline import InitError
from orch.container.layout import TINI, run_mount
from orch.container.owners import remove_run
from orch.container.serverun import compose_request
from orch.fleet import launch
from orch.run.folder import RunFolder
from orch.run.uids import drop_argv

LEAD = "--lead"
RESUME = "--resume"


@dataclass(frozen=True)
class Lead:
    """compose's `lead`: a spec to run afresh, or (`spec` None) the run to continue."""

    run: str
    spec: str | None


def parse_lead(args: list[str], run: str | None) -> Lead:
    """`--lead`'s one argument: the spec (compose's default `/workspace/fleet.yaml`), or `--resume`."""
    if len(args) != 1 or not args[0]:
        raise InitError("--lead takes one argument: the fleet spec, or --resume")
    if run is None:
        raise InitError("--lead needs ORCH_RUN, the run's name")
    return Lead(run, None if args[0] == RESUME else args[0])


def as_run_uid(uid: int, gid: int, argv: list[str]) -> int:
    """Run `argv` as the run's uid with no capability, no groups and no-new-privs (its output this
    process's); its exit code."""
    return subprocess.run([*drop_argv(uid, gid), *argv], check=False).returncode


def in_use(name: str) -> bool:
    """Whether another container on the same runs volume serves or drives run `name` now: its `orch
    serve-run` holds the run's serve lock, its controller the controller lock (flock: the same kernel sees
    both containers' locks). A dead container's locks went with its processes."""
    run = RunFolder(Path(run_mount(name)))
    for lock in (run.serve_lock, run.controller_lock):
        try:
            fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue  # none (never served), or a link planted in its place: not a lock anyone holds
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
    return False


def start_lead(lead: Lead, uid: int, gid: int) -> int:
    """Before anything of the run is made: the spec checked as the run's uid (a bad spec leaves everything
    as it was, a previous run included), then a previous run of the name removed (compose's `lead` starts
    afresh). For `--resume`: the run must exist. 0, or the exit code to stop with."""
    if lead.spec is None:
        if not RunFolder(Path(run_mount(lead.run))).exists():
            print(f"orch-init: no run {lead.run!r} to resume (ORCH_RUN); start it without --resume", file=sys.stderr)
            return 2
        return 0
    code = as_run_uid(uid, gid, ["orch", "spec", "check", lead.spec, "--prepare"])
    if code == 0:
        remove_run(lead.run)
    return code


def prepare_lead(lead: Lead, uid: int, gid: int) -> int:
    """The run's folder made by `orch run SPEC --prepare` as the run's uid (no worker started yet); its
    exit code (2: bad input)."""
    if lead.spec is None:
        return 0
    return as_run_uid(uid, gid, ["orch", "run", lead.spec, "--name", lead.run, "--prepare"])


def lead_command(lead: Lead) -> list[str]:
    """What the init execs (as the run's uid) for `lead`: serve-run launches the fleet, then drives it."""
    resume = [RESUME] if lead.spec is None else []
    return [TINI, "--", "orch", "serve-run", lead.run, "--drive", *resume]


def create_fleet_run(name: str, uid: int, gid: int) -> None:
    """compose's `serve-run NAME --create` on its first start: the run folder made here, from the same
    settings serve-run reads, as `orch up` makes it on the host, strict where the agent can be (orch run's
    default in a container), so that each worker gets its own files before the run's uid takes over.
    Everything made is the run's uid's; the gateway's `model/` stays its own."""
    run = RunFolder(Path(run_mount(name)))
    if run.exists():
        return
    _, info = launch.plan(compose_request(name, strict=True))
    before = set(run.root.rglob("*")) if run.root.is_dir() else set()
    run.create(info)
    for path in (run.root, *run.root.rglob("*")):
        if path not in before and path != run.model_dir and run.model_dir not in path.parents:
            os.chown(path, uid, gid, follow_symlinks=False)

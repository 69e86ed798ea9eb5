"""The gate a change passes before review and the queue: the checks, run by the controller in a fresh
disposable sandbox (a copy of the tree, no network, no credentials, no run folder, limits on time, output,
processes, memory and disk: orch.lead.changes.checkwatch), on the change's code with the base's tests
(orch.lead.changes.grading); its other half, the scope, is orch.lead.changes.scope.

The sandbox is bubblewrap where it works (on a machine): a new network namespace with nothing in it, a new
pid namespace (killing it kills every process a check started), the filesystem read-only but for a few tmpfs
of the disk cap's size (/tmp, where each check copies the tree it is handed read-only, /var/tmp, /dev/shm),
and the home folder, ORCH_HOME (run folders, agent config dirs), /run (the Docker socket) hidden under empty
read-only tmpfs. As root (no user namespace) each check runs as a uid of its own (orch.lead.changes.checkuids).
In a run's container bwrap cannot work (Docker's seccomp profile refuses its user namespace), so there the
checks run as a uid of their own (orch.run.uids.checks_uid) that the container's firewall cuts off the
network, loopback included, with no groups or capabilities, on its own copy of the tree, its processes all
killed after each check; it can read what any uid may read (not the credentials: the gateway's and the
workers' files are theirs alone). A shared run's container cannot start that uid: its checks run as the run's
own uid, every worker's already (orch.lead.changes.uidchecks). Where none works, a run with checks is refused in
one line before any check runs; one that stops working in the run is found again at its next check.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orch import prereqs, procs
from orch.backends import registry as backends
from orch.backends.base import ChecksSandbox
from orch.backends.local import bwrap
from orch.errors import OrchError, UsageError
from orch.jobs.changes import Change, CheckResult, ChecksRecord
from orch.lead.changes import checkuids, uidchecks
from orch.lead.changes.checkwatch import (
    DEFAULT_LIMITS,
    SANDBOX_TMPFS,
    CheckLimits,
    run_one,
    run_via_tmux,
    uid_meter,
)
from orch.lead.changes.grading import Grading, graded_tree
from orch.lead.changes.repo import RunRepo
from orch.lead.changes.stopper import Stopper
from orch.lead.changes.switch import can_switch
from orch.lead.changes.uidchecks import kill_checks_uid, uid_argv
from orch.run.files import atomic_write
from orch.run.paths import agents_dir, launch_dir, orch_home
from orch.run.records import Isolation, RunInfo
from orch.run.uids import checks_uid, drop_argv
from orch.settings.user import BWRAP

TREE_MOUNT = "/tmp/orch-check/tree"
"""Where the check's own copy of the tree is, inside the sandbox (a fixed path: output tails compare across trees)."""
SOURCE_MOUNT = "/tmp/orch-check/source"
"""Where the controller's checkout is bound read-only, for the check to copy."""
NOT_FOUND, NOT_STARTED = 127, 125
HOME_IN_SANDBOX = "/tmp/orch-check/home"
SANDBOXES = {
    ChecksSandbox.BWRAP: "bwrap",
    ChecksSandbox.OWN_UID: f"uid {checks_uid()}",
    ChecksSandbox.RUN_UID: "run uid",
}
"""How a checks record names its sandbox."""
CHECK_PIDS = 1024
"""Processes and threads one check may have (RLIMIT_NPROC, set inside its sandbox: a fork bomb in a change's
code stops there and leaves the controller room to fork; the kernel never applies it to root)."""
CHECK_NICE = 10
"""A check's niceness: a check spinning on every core leaves the CPU to the controller, tmux and the workers first."""


@dataclass(frozen=True)
class Host:
    """The run the checks are for, as far as their sandbox is concerned: its tmux server (which starts the checks'
    uid in a container when this process cannot) and whether its workers share the run's uid (then, in a
    container, the checks run as it: orch.lead.changes.uidchecks)."""

    tmux_socket: str | None = None
    shared: bool = False

    @classmethod
    def of(cls, info: RunInfo) -> Host:
        return cls(info.tmux_socket, info.isolation is Isolation.SHARED)


NO_RUN = Host()
"""Checks before a run exists (a local run's base, in the process that starts it)."""


def sandbox_available(host: Host = NO_RUN) -> str | None:
    """None when the checks' sandbox works here, else why not (one line, for a UsageError)."""
    return _sandbox(host)[1]


def sandbox_kind(host: Host = NO_RUN) -> ChecksSandbox:
    """The sandbox the checks run in here (see the module's doc); UsageError saying how to fix it when none works
    here (never a check's failure: a sandbox that cannot be made has run no check)."""
    kind, why = _sandbox(host)
    if kind is None:
        raise UsageError(why or "no sandbox for the checks", hint=sandbox_fix(host))
    return kind


def sandbox_fix(host: Host = NO_RUN) -> str:
    """How to get the checks' sandbox working on this machine."""
    if backends.here().container:
        how = "give the run strict isolation and the default egress (the checks need a uid the firewall cuts off)"
    elif prereqs.bwrap_path() is None:
        how = f"apt-get install bubblewrap (or set {BWRAP.name})"
    else:
        how = prereqs.USERNS_ON
    return f"{how}, or drop the spec's checks:"


_FOUND: dict[tuple[tuple[ChecksSandbox, ...], Path | None, Host], ChecksSandbox] = {}
"""The sandbox a probe ran `true` in, per what this place offers, which bubblewrap and which run. Only a working one
is kept: one that failed is tried again (bubblewrap installed, user namespaces turned on), and one that stops
working is forgotten (`_forget`) and looked for again at once (`_sandbox_gone`)."""


def _sandbox(host: Host) -> tuple[ChecksSandbox | None, str | None]:
    """The first of the sandboxes this place offers the checks (its backend's `checks`) that works for this run,
    or why none does. The run's own uid only for a shared run (never a strict one's fallback)."""
    offered = tuple(k for k in backends.here().checks if k is not ChecksSandbox.RUN_UID or host.shared)
    key = (offered, prereqs.bwrap_path(), host)
    if (found := _FOUND.get(key)) is not None:
        return found, None
    why = []
    for kind in offered:
        not_here = _works(kind, host)
        if not_here is None:
            _FOUND[key] = kind
            return kind, None
        why.append(not_here)
    return None, "; and ".join(why)


def _works(kind: ChecksSandbox, host: Host) -> str | None:
    if kind is ChecksSandbox.BWRAP:
        return _bwrap_works()
    if kind is ChecksSandbox.OWN_UID:
        return uidchecks.probe(host.tmux_socket)
    return None  # the run's own uid: this process is it


def _forget() -> None:
    _FOUND.clear()
    can_switch.cache_clear()


def _bwrap_works() -> str | None:
    bwrap = prereqs.bwrap_path()
    if bwrap is None:
        return "the checks' sandbox cannot be made: bubblewrap is not installed"
    with tempfile.TemporaryDirectory(prefix="orch-check-") as tmp:
        try:
            argv = sandbox_argv(Path(tmp), "", "true", DEFAULT_LIMITS, None)
            done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"the checks' sandbox cannot be made: {bwrap} cannot start here: {exc}"
    if done.returncode != 0:
        why = " ".join(done.stderr.decode(errors="replace").split())[:200] or f"exit {done.returncode}"
        return f"the checks' sandbox cannot be made: {bwrap} could not make its namespaces: {why}"
    return None


def _unmade(kind: ChecksSandbox, result: CheckResult) -> bool:
    """Whether a check ended as its sandbox's maker does when it cannot make it (bubblewrap's exit 1 and `bwrap:`
    line, setpriv's 127 and `setpriv:` line): then none of the command ran."""
    if kind is ChecksSandbox.BWRAP:
        return result.exit_code == 1 and result.output_tail.lstrip().startswith("bwrap:")
    return uidchecks.switch_failed(result)


def _sandbox_gone(kind: ChecksSandbox, host: Host) -> UsageError | None:
    """After a check whose sandbox was not made: the probe tried again; if the sandbox cannot be made any more, that
    is the error (no check ran)."""
    _forget()
    why = _works(kind, host)
    return None if why is None else UsageError(why, hint=sandbox_fix(host))


def slots(wanted: int, host: Host = NO_RUN) -> int:
    """How many checks may run at once: in a run's container every check runs as the one checks' uid and its
    wrapper ends by killing every process of that uid (UID_WRAPPER), so there one at a time."""
    return 1 if sandbox_kind(host) == ChecksSandbox.OWN_UID else max(1, wanted)


def stop_uid_checks(host: Host) -> None:
    """In a run's container: kill every process of the checks' uid (a check's `timeout` runs in a process group
    of its own, which killing the wrapper's misses), from here or through the run's tmux server; under shared
    isolation every process carrying a check's token. Elsewhere, nothing to do: a bubblewrap sandbox dies whole
    with its first process."""
    kind = _sandbox(host)[0]
    if kind is ChecksSandbox.OWN_UID:
        kill_checks_uid(host.tmux_socket)
    elif kind is ChecksSandbox.RUN_UID:
        uidchecks.kill_marked(None)


def stop_leftover_checks(host: Host) -> list[int]:
    """At a controller's start, before it runs any check: in a run's container, the processes a controller killed
    outright left running as the checks' uid, or carrying a check's token (its checks went on to their timeout
    beside the ones a resumed controller starts again), killed; their pids. Only this run's: a run has its
    container (its own pid namespace) and the checks' uid there; and only that uid's: `kill -1` as an
    unprivileged uid signals no other uid's process (not the workers', the controller's, the gateway's)."""
    kind = _sandbox(host)[0]
    if kind is ChecksSandbox.RUN_UID:
        return uidchecks.kill_marked(None)
    if kind is not ChecksSandbox.OWN_UID:
        return []
    left = sorted(pid for pid in procs.of_uids({checks_uid()}) if procs.alive(pid))
    if left:
        kill_checks_uid(host.tmux_socket)
    return left


def hidden_paths() -> list[Path]:
    """What a check must not see, each hidden under an empty tmpfs: the home folder (agent credentials),
    ORCH_HOME (run folders, the run's repository, agent config dirs, gateway state), the agents' config root."""
    home = Path(os.path.expanduser("~"))
    candidates = {home, orch_home(), agents_dir(), launch_dir().parent}
    return sorted(p for p in candidates if p != Path("/") and p.is_dir())


def sandbox_argv(tree: Path, subdir: str, command: str, limits: CheckLimits, uid: int | None) -> list[str]:
    """bwrap's argv running `sh -c command` on its own copy of `tree` (bound read-only at SOURCE_MOUNT, copied
    to TREE_MOUNT): no network (an empty network namespace), its own pid namespace (all its processes die with
    it), everything read-only but SANDBOX_TMPFS (each a tmpfs of the disk cap's size: the kernel refuses the
    check more), hidden_paths() and /run empty, a clean environment. As root (above RLIMIT_NPROC, and no user
    namespace, or uid `uid` would not exist in it) the check runs as `uid`, its own for as long as it runs."""
    box = bwrap.Bwrap(prereqs.bwrap_path() or "bwrap").add("--new-session").ro("/")
    box.add("--dev", "/dev", "--proc", "/proc")
    hidden = [*hidden_paths(), Path("/run")]  # empty, then read-only (a tmpfs the check could fill otherwise)
    for path in hidden:
        box.tmpfs(path)
    for path in hidden:  # once all are there: one may be below another (agents/ in ORCH_HOME)
        box.remount_ro(path)
    # /tmp after the hidden paths: the home folder may be under it; the tree is bound from the host's view.
    for place in SANDBOX_TMPFS:
        box.tmpfs(place, limits.disk, "1777")
    box.remount_ro("/dev").dir(Path(TREE_MOUNT).parent, "1777").ro(tree, SOURCE_MOUNT).dir(HOME_IN_SANDBOX, "0777")
    box.add("--chdir", "/tmp", "--clearenv").setenv(
        {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": HOME_IN_SANDBOX,
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "CI": "1",
            "NO_COLOR": "1",
        }
    )
    root = os.geteuid() == 0
    drop = drop_argv(uid, uid) if root and uid is not None else []
    return [*box.args, *drop, *check_limits(command, subdir)]


def check_limits(command: str, subdir: str) -> list[str]:
    """What a check runs as inside its sandbox: niced, at most CHECK_PIDS processes (the shell's own `ulimit`, one
    exec fewer than prlimit: bash spells it -u, dash -p), on its own copy of the tree, then the command.
    RLIMIT_NPROC counts a uid's processes: in the sandbox's own user namespace only the check's; as root (no user
    namespace) those of the uid this check leased (orch.lead.changes.checkuids)."""
    limit = f"ulimit -u {CHECK_PIDS} 2>/dev/null || ulimit -p {CHECK_PIDS} || exit {NOT_STARTED}"
    copy = (
        f"mkdir {TREE_MOUNT} && cp -a {SOURCE_MOUNT}/. {TREE_MOUNT}/ || "
        f'{{ echo "orch: the tree could not be copied for the check (its disk cap?)"; exit {NOT_STARTED}; }}'
    )
    where = shlex.quote(f"{TREE_MOUNT}/{subdir}" if subdir else TREE_MOUNT)
    script = f"{limit}\n{copy}\ncd {where} || exit {NOT_STARTED}\n{command}"
    return ["nice", "-n", str(CHECK_NICE), "/bin/sh", "-c", script]


def run_checks(
    checks: Sequence[str],
    tree: Path,
    *,
    subdir: str = "",
    limits: CheckLimits = DEFAULT_LIMITS,
    host: Host = NO_RUN,
    stopper: Stopper | None = None,
) -> list[CheckResult]:
    """Run each check command (`sh -c`) in the sandbox on its own copy of `tree` (the controller's checkout:
    never written), from `tree/subdir`; one result per command, in order, whatever each exits with.
    `host`: the run (in a container its tmux server starts the checks' uid when this process cannot). `stopper`:
    ChecksStopped once it is stopped (from another thread), the running check killed. UsageError when the sandbox
    stopped working (no check ran)."""
    kind = sandbox_kind(host)
    stopper = stopper or Stopper()
    results = []
    for command in checks:
        result = _run_one(kind, command, tree, subdir, limits, host, stopper)
        if _unmade(kind, result):
            if (gone := _sandbox_gone(kind, host)) is not None:
                raise gone
            # It can still be made: a sandbox that failed once (bubblewrap's "Invalid argument", seen under load)
            # gets one more try. A check that only prints such a line is run twice and stays its own result.
            result = _run_one(kind, command, tree, subdir, limits, host, stopper)
        results.append(result)
    return results


def _run_one(
    kind: ChecksSandbox, command: str, tree: Path, subdir: str, limits: CheckLimits, host: Host, stopper: Stopper
) -> CheckResult:
    if kind is ChecksSandbox.BWRAP:
        with checkuids.lease() if os.geteuid() == 0 else contextlib.nullcontext() as uid:
            return run_one(command, sandbox_argv(tree, subdir, command, limits, uid), limits, stopper)
    if kind is ChecksSandbox.RUN_UID:
        return uidchecks.run_as_run(command, tree, subdir, limits, stopper)
    # The checks' uid copies the tree itself: it must be able to read it.
    for folder in (tree.parent, tree):
        folder.chmod(0o755)
    meter, clear = uid_meter(checks_uid()), functools.partial(kill_checks_uid, host.tmux_socket, clear=True)
    argv = uid_argv(tree, subdir, command, limits)
    if not can_switch(checks_uid()) and host.tmux_socket is not None:
        return run_via_tmux(host.tmux_socket, command, argv, limits, stopper, meter, clear)
    return run_one(command, argv, limits, stopper, lambda _pid: (meter, clear))


def check_commit(
    repo: RunRepo,
    commit_or_tree: str,
    checks: Sequence[str],
    label: str,
    *,
    limits: CheckLimits = DEFAULT_LIMITS,
    grading: Grading | None = None,
    baseline: Sequence[CheckResult] = (),
    stopper: Stopper | None = None,
) -> ChecksRecord:
    """Check out `commit_or_tree` (with `grading`: its grading paths as in the base, orch.lead.changes.grading)
    into a fresh temporary folder, run the checks there, remove it; the record names the regressions against
    `baseline`."""
    if grading is not None:
        commit_or_tree = graded_tree(repo, commit_or_tree, grading)
    with tempfile.TemporaryDirectory(prefix="orch-check-") as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        repo.checkout(commit_or_tree, tree)
        host = _host(repo)
        results = run_checks(checks, tree, subdir=repo.subdir, limits=limits, host=host, stopper=stopper)
    return ChecksRecord(
        tree=label, sandbox=SANDBOXES[sandbox_kind(host)], results=results, regressions=regressions(baseline, results)
    )


def _host(repo: RunRepo) -> Host:
    try:
        return Host.of(repo.run.info())
    except OrchError:  # a repository being prepared: no run yet
        return NO_RUN


def baseline(repo: RunRepo, checks: Sequence[str], *, limits: CheckLimits = DEFAULT_LIMITS) -> ChecksRecord:
    """The checks on the base, once, written to base.checks.json. UsageError when a command does not exist
    (exit 127 on the base) or could not start (125)."""
    record = check_commit(repo, repo.base, checks, f"base {repo.base}", limits=limits)
    refuse_missing(record)
    atomic_write(repo.run.base_checks, record.model_dump_json(indent=2) + "\n")
    return record


def refuse_missing(record: ChecksRecord) -> None:
    """UsageError for the first check whose command was not found on the base (sh's exit 127), or that could not
    start in its sandbox (125: the tree does not fit its disk cap, say)."""
    for result in record.results:
        said = " ".join(result.output_tail.split())[-160:]
        if result.exit_code == NOT_FOUND:
            raise UsageError(
                f"check {result.command!r} does not exist (exit 127 on the base: {said})",
                hint="fix the command in the spec's checks: (it runs with sh -c in the tree's root)",
            )
        if result.exit_code == NOT_STARTED or result.stopped:
            raise UsageError(
                f"check {result.command!r} cannot run on the base ({result.stopped or 'exit 125'}: {said})",
                hint="raise the spec's limits: (the checks have the workers' memory and disk caps)",
            )


def gate_checks(
    repo: RunRepo,
    change: Change,
    checks: Sequence[str],
    base_results: Sequence[CheckResult],
    *,
    limits: CheckLimits = DEFAULT_LIMITS,
    grading: Grading | None = None,
    stopper: Stopper | None = None,
) -> ChecksRecord:
    """The checks on the change's tree (base + patch, its grading paths the base's), written to
    changes/<job>/checks.json."""
    if change.tree is None:
        raise ValueError(f"change {change.job} has no tree to check")
    label = f"change {change.job} on {change.base}"
    record = check_commit(
        repo, change.tree, checks, label, limits=limits, grading=grading, baseline=base_results, stopper=stopper
    )
    folder = repo.run.change_dir(change.job)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(repo.run.change_checks(change.job), record.model_dump_json(indent=2) + "\n")
    return record


def regressions(base: Sequence[CheckResult], now: Sequence[CheckResult]) -> list[str]:
    """Commands that passed on the base and do not pass now (a check failing on the base may keep failing)."""
    passed = {r.command for r in base if r.passed}
    return [r.command for r in now if r.command in passed and not r.passed]

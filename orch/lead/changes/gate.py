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
workers' files are theirs alone). Without either, a run with checks is refused in one line.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from orch import prereqs, procs
from orch.backends import registry as backends
from orch.backends.base import ChecksSandbox
from orch.backends.local import bwrap
from orch.container.egress import read_report
from orch.errors import OrchError, UsageError
from orch.jobs.changes import Change, CheckResult, ChecksRecord
from orch.lead.changes import checkuids
from orch.lead.changes.checkwatch import (
    DEFAULT_LIMITS,
    SANDBOX_TMPFS,
    UID_AREAS,
    CheckLimits,
    run_one,
    run_via_tmux,
    uid_meter,
)
from orch.lead.changes.grading import Grading, graded_tree
from orch.lead.changes.repo import RunRepo
from orch.lead.changes.stopper import Stopper
from orch.lead.changes.switch import can_switch
from orch.run.files import atomic_write
from orch.run.paths import agents_dir, launch_dir, orch_home
from orch.run.uids import checks_uid, drop_argv
from orch.settings.user import BWRAP

TREE_MOUNT = "/tmp/orch-check/tree"
"""Where the check's own copy of the tree is, inside the sandbox (a fixed path: output tails compare across trees)."""
SOURCE_MOUNT = "/tmp/orch-check/source"
"""Where the controller's checkout is bound read-only, for the check to copy."""
NOT_FOUND, NOT_STARTED = 127, 125
HOME_IN_SANDBOX = "/tmp/orch-check/home"
SANDBOXES = {ChecksSandbox.BWRAP: "bwrap", ChecksSandbox.OWN_UID: f"uid {checks_uid()}"}
"""How a checks record names its sandbox."""
CHECK_PIDS = 1024
"""Processes and threads one check may have (RLIMIT_NPROC, set inside its sandbox: a fork bomb in a change's
code stops there and leaves the controller room to fork; the kernel never applies it to root)."""
CHECK_NICE = 10
"""A check's niceness: a check spinning on every core leaves the CPU to the controller, tmux and the workers first."""


def sandbox_available() -> str | None:
    """None when the checks' sandbox works here, else why not (one line, for a UsageError)."""
    return _sandbox()[1]


def sandbox_kind() -> ChecksSandbox:
    """The sandbox the checks run in here (see the module's doc); UsageError saying how to fix it when none works
    here (never a check's failure: a sandbox that cannot be made has run no check)."""
    kind, why = _sandbox()
    if kind is None:
        raise UsageError(why or "no sandbox for the checks", hint=sandbox_fix())
    return kind


def sandbox_fix() -> str:
    """How to get the checks' sandbox working on this machine."""
    how = f"apt-get install bubblewrap (or set {BWRAP.name})" if prereqs.bwrap_path() is None else prereqs.USERNS_ON
    return f"{how}, or drop the spec's checks:"


_FOUND: dict[tuple[tuple[ChecksSandbox, ...], Path | None], ChecksSandbox] = {}
"""The sandbox a probe ran `true` in, per what this place offers and which bubblewrap. Only a working one is kept:
one that failed is tried again (bubblewrap installed, user namespaces turned on), and one that stops working
is forgotten (`_forget`)."""


def _sandbox() -> tuple[ChecksSandbox | None, str | None]:
    """The first of the sandboxes this place offers the checks (its backend's `checks`) that works, or why none
    does."""
    key = (tuple(backends.here().checks), prereqs.bwrap_path())
    if (found := _FOUND.get(key)) is not None:
        return found, None
    why = []
    for kind in key[0]:
        not_here = _bwrap_works() if kind is ChecksSandbox.BWRAP else _uid_works()
        if not_here is None:
            _FOUND[key] = kind
            return kind, None
        why.append(not_here)
    return None, "; and ".join(why)


def _forget() -> None:
    _FOUND.clear()


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


def _sandbox_gone(result: CheckResult) -> UsageError | None:
    """A check that ended as bubblewrap does when it cannot make the sandbox (exit 1, its own `bwrap:` line): the
    probe is tried again, and if the sandbox cannot be made any more, that is the error (no check ran). A check
    that only prints such a line costs one probe and stays its own result."""
    if result.exit_code != 1 or not result.output_tail.lstrip().startswith("bwrap:"):
        return None
    _forget()
    why = _bwrap_works()
    return None if why is None else UsageError(why, hint=sandbox_fix())


def _uid_works() -> str | None:
    """In a run's container: the checks as their own uid, which the firewall gives no network. Started
    from here when this process may switch uid, else through the run's tmux server (the one process of a
    strict run that keeps SETUID: a controller reached by `docker exec` holds no capability)."""
    report = read_report() or {}
    if report.get("checks_uid") != checks_uid():
        return f"the container's firewall does not cut uid {checks_uid()} off the network (egress open?)"
    if not can_switch(checks_uid()) and shutil.which("tmux") is None:
        return f"cannot start a process as uid {checks_uid()} (a strict run's tmux server can; none here)"
    return None


# Run as the checks' uid: each file at most the disk cap (RLIMIT_FSIZE, in 512-byte blocks as sh counts them), its
# own copy of the tree (the controller's stays as taken), the check under `timeout`, then every process of that
# uid killed (`kill -1` spares only the caller) and the copy removed.
UID_WRAPPER = """ulimit -f "$5" || exit 125
t=$(mktemp -d) || exit 125
cp -a "$1/." "$t/" || { echo "orch: the tree could not be copied for the check"; exit 125; }
cd "$t/$2" || exit 125
HOME="$t" TMPDIR="$t" timeout -s KILL "$3" sh -c "$4"
rc=$?
cd /
kill -9 -1 2>/dev/null
rm -rf "$t"
exit $rc"""


def slots(wanted: int) -> int:
    """How many checks may run at once: in a run's container every check runs as the one checks' uid and its
    wrapper ends by killing every process of that uid (UID_WRAPPER), so there one at a time."""
    return 1 if sandbox_kind() == ChecksSandbox.OWN_UID else max(1, wanted)


def stop_uid_checks(tmux_socket: str | None) -> None:
    """In a run's container: kill every process of the checks' uid (a check's `timeout` runs in a process group
    of its own, which killing the wrapper's misses), from here or through the run's tmux server. Elsewhere,
    nothing to do: a bubblewrap sandbox dies whole with its first process."""
    if _sandbox()[0] == ChecksSandbox.OWN_UID:
        kill_checks_uid(tmux_socket)


def stop_leftover_checks(tmux_socket: str | None) -> list[int]:
    """At a controller's start, before it runs any check: in a run's container, the processes a controller killed
    outright left running as the checks' uid (its checks went on to their timeout beside the ones a resumed
    controller starts again), killed; their pids. Only this run's: a run has its container (its own pid
    namespace) and the checks' uid there; and only that uid's: `kill -1` as an unprivileged uid signals no
    other uid's process (not the workers', the controller's, the gateway's)."""
    if _sandbox()[0] != ChecksSandbox.OWN_UID:
        return []
    left = sorted(pid for pid in procs.of_uids({checks_uid()}) if procs.alive(pid))
    if left:
        kill_checks_uid(tmux_socket)
    return left


def kill_checks_uid(tmux_socket: str | None, clear: bool = False) -> None:
    """`kill -9 -1` as the checks' uid (no capability, no-new-privs: it reaches that uid's processes alone), run
    from here when this process may switch uid, else by the run's tmux server (which keeps SETUID). `clear`: then
    its files in /tmp and /dev/shm removed too (a check killed past a cap, or its wrapper with it, left them)."""
    areas = " ".join(map(str, UID_AREAS))  # quietly: through the run's tmux server, output would show in a pane
    script = "kill -9 -1" + (f"; find {areas} -xdev -user {checks_uid()} -delete 2>/dev/null; true" if clear else "")
    argv = [*drop_argv(checks_uid(), checks_uid()), "sh", "-c", script]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        if can_switch(checks_uid()):
            subprocess.run(argv, capture_output=True, timeout=30, check=False)
        elif tmux_socket is not None:
            tmux = shutil.which("tmux") or "tmux"
            shell = shlex.join(argv)
            subprocess.run([tmux, "-L", tmux_socket, "-f", "/dev/null", "run-shell", shell], timeout=30, check=False)


def uid_argv(tree: Path, subdir: str, command: str, limits: CheckLimits) -> list[str]:
    """setpriv to the checks' uid (no groups, no capabilities, no-new-privs), a clean environment, UID_WRAPPER."""
    env = ["env", "-i", f"PATH={os.environ.get('PATH', '/usr/local/bin:/usr/bin:/bin')}", "LANG=C.UTF-8", "CI=1"]
    blocks = "unlimited" if limits.disk is None else str(max(1, limits.disk // 512))
    wrapper = [UID_WRAPPER, "orch-check", str(tree), subdir or ".", f"{limits.timeout:g}", command, blocks]
    return [*drop_argv(checks_uid(), checks_uid()), *env, "NO_COLOR=1", "/bin/sh", "-c", *wrapper]


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
    tmux_socket: str | None = None,
    stopper: Stopper | None = None,
) -> list[CheckResult]:
    """Run each check command (`sh -c`) in the sandbox on its own copy of `tree` (the controller's checkout:
    never written), from `tree/subdir`; one result per command, in order, whatever each exits with.
    `tmux_socket`: the run's tmux server, which starts the checks' uid when this process cannot (a container's
    controller). `stopper`: ChecksStopped once it is stopped (from another thread), the running check killed."""
    kind = sandbox_kind()
    stopper = stopper or Stopper()
    if kind == ChecksSandbox.BWRAP:
        results = []
        for command in checks:
            with checkuids.lease() if os.geteuid() == 0 else contextlib.nullcontext() as uid:
                argv = sandbox_argv(tree, subdir, command, limits, uid)
                results.append(run_one(command, argv, limits, stopper, None))
            if (gone := _sandbox_gone(results[-1])) is not None:
                raise gone
        return results
    # The checks' uid copies the tree itself: it must be able to read it.
    for folder in (tree.parent, tree):
        folder.chmod(0o755)
    meter, clear = uid_meter(checks_uid()), functools.partial(kill_checks_uid, tmux_socket, clear=True)
    if not can_switch(checks_uid()) and tmux_socket is not None:
        return [
            run_via_tmux(tmux_socket, cmd, uid_argv(tree, subdir, cmd, limits), limits, stopper, meter, clear)
            for cmd in checks
        ]
    return [run_one(cmd, uid_argv(tree, subdir, cmd, limits), limits, stopper, (meter, clear)) for cmd in checks]


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
        socket = _socket(repo)
        results = run_checks(checks, tree, subdir=repo.subdir, limits=limits, tmux_socket=socket, stopper=stopper)
    return ChecksRecord(
        tree=label, sandbox=SANDBOXES[sandbox_kind()], results=results, regressions=regressions(baseline, results)
    )


def _socket(repo: RunRepo) -> str | None:
    try:
        return repo.run.info().tmux_socket
    except OrchError:  # a repository being prepared: no run yet
        return None


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

"""The gate a change passes before review and the queue: the checks, run by the controller in a fresh
disposable sandbox (a copy of the tree, no network, no credentials, no run folder, limits on time and
output); its other half, the scope, is orch.lead.changes.scope.

The sandbox is bubblewrap where it works (on a machine): a new network namespace with nothing in it, a new
pid namespace (killing it kills every process a check started), the filesystem read-only but for the copy
and a private /tmp, and the home folder, ORCH_HOME (run folders, agent config dirs), /run (the Docker
socket) hidden under empty tmpfs. In a run's container bwrap cannot work (Docker's seccomp profile refuses
its user namespace), so there the checks run as a uid of their own (orch.run.uids.checks_uid) that the
container's firewall cuts off the network, loopback included, with no groups or capabilities, on its own
copy of the tree, its processes all killed after each check; it can read what any uid may read (not the
credentials: the gateway's and the workers' files are theirs alone). Without either, a run with checks is
refused in one line.
"""

from __future__ import annotations

import contextlib
import functools
import os
import selectors
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from orch import procs, settings
from orch.backends.local import bwrap as bwrap_binary
from orch.container.egress import read_report
from orch.errors import OrchError, UsageError
from orch.jobs.changes import Change, CheckResult, ChecksRecord
from orch.lead.changes.repo import RunRepo
from orch.lead.changes.stopper import Stopper
from orch.lead.changes.switch import can_switch, via_tmux
from orch.run.files import atomic_write
from orch.run.paths import agents_dir, launch_dir, orch_home
from orch.run.uids import checks_uid, drop_argv

CHECK_TIMEOUT = 600.0
OUTPUT_BYTES = 64 << 10
TREE_MOUNT = "/tmp/orch-check/tree"
"""Where the copy is seen inside the sandbox (a fixed path: output tails compare across trees)."""
NOT_FOUND = 127
HOME_IN_SANDBOX = "/tmp/orch-check/home"
SANDBOXES = {"bwrap": "bwrap", "uid": f"uid {checks_uid()}"}
CHECK_PIDS = 1024
"""Processes and threads one check may have (RLIMIT_NPROC, set inside its sandbox: a fork bomb in a change's
code stops there and leaves the controller room to fork; the kernel never applies it to root)."""
CHECK_NICE = 10
"""A check's niceness: a check spinning on every core leaves the CPU to the controller, tmux and the workers first."""


def sandbox_available() -> str | None:
    """None when the checks' sandbox works here, else why not (one line, for a UsageError)."""
    return _sandbox()[1]


def sandbox_kind() -> str:
    """`bwrap` or `uid` (see the module's doc); UsageError when neither works here."""
    kind, why = _sandbox()
    if kind is None:
        raise UsageError(why or "no sandbox for the checks", hint="install bubblewrap, or drop the spec's checks:")
    return kind


@functools.lru_cache(maxsize=1)
def _sandbox() -> tuple[str | None, str | None]:
    bwrap = _bwrap_works()
    if bwrap is None:
        return "bwrap", None
    if not settings.IN_CONTAINER.get():
        return None, bwrap
    uid = _uid_works()
    if uid is None:
        return "uid", None
    return None, f"{bwrap}; and {uid}"


def _bwrap_works() -> str | None:
    if bwrap_binary.find() is None:
        return "the checks run sandboxed with bubblewrap, which is not installed (apt-get install bubblewrap)"
    with tempfile.TemporaryDirectory(prefix="orch-check-") as tmp:
        try:
            done = subprocess.run(sandbox_argv(Path(tmp), "", "true"), capture_output=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bubblewrap cannot start here: {exc}"
    if done.returncode != 0:
        why = " ".join(done.stderr.decode(errors="replace").split())[:200]
        return f"bubblewrap cannot make the checks' sandbox here: {why or f'exit {done.returncode}'}"
    return None


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


# Run as the checks' uid: its own copy of the tree (the controller's stays as taken), the check under
# `timeout`, then every process of that uid killed (`kill -1` spares only the caller) and the copy removed.
UID_WRAPPER = """t=$(mktemp -d) || exit 125
cp -a "$1/." "$t/" || exit 125
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
    return 1 if sandbox_kind() == "uid" else max(1, wanted)


def stop_uid_checks(tmux_socket: str | None) -> None:
    """In a run's container: kill every process of the checks' uid (a check's `timeout` runs in a process group
    of its own, which killing the wrapper's misses), from here or through the run's tmux server. Elsewhere,
    nothing to do: a bubblewrap sandbox dies whole with its first process."""
    if _sandbox()[0] == "uid":
        kill_checks_uid(tmux_socket)


def stop_leftover_checks(tmux_socket: str | None) -> list[int]:
    """At a controller's start, before it runs any check: in a run's container, the processes a controller killed
    outright left running as the checks' uid (its checks went on to their timeout beside the ones a resumed
    controller starts again), killed; their pids. Only this run's: a run has its container (its own pid
    namespace) and the checks' uid there; and only that uid's: `kill -1` as an unprivileged uid signals no
    other uid's process (not the workers', the controller's, the gateway's)."""
    if _sandbox()[0] != "uid":
        return []
    left = sorted(pid for pid in procs.of_uids({checks_uid()}) if procs.alive(pid))
    if left:
        kill_checks_uid(tmux_socket)
    return left


def kill_checks_uid(tmux_socket: str | None) -> None:
    """`kill -9 -1` as the checks' uid (no capability, no-new-privs: it reaches that uid's processes alone), run
    from here when this process may switch uid, else by the run's tmux server (which keeps SETUID)."""
    argv = [*drop_argv(checks_uid(), checks_uid()), "kill", "-9", "-1"]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        if can_switch(checks_uid()):
            subprocess.run(argv, capture_output=True, timeout=30, check=False)
        elif tmux_socket is not None:
            tmux = shutil.which("tmux") or "tmux"
            shell = shlex.join(argv)
            subprocess.run([tmux, "-L", tmux_socket, "-f", "/dev/null", "run-shell", shell], timeout=30, check=False)


def uid_argv(tree: Path, subdir: str, command: str, timeout: float) -> list[str]:
    """setpriv to the checks' uid (no groups, no capabilities, no-new-privs), a clean environment, UID_WRAPPER."""
    env = ["env", "-i", f"PATH={os.environ.get('PATH', '/usr/local/bin:/usr/bin:/bin')}", "LANG=C.UTF-8", "CI=1"]
    wrapper = ["/bin/sh", "-c", UID_WRAPPER, "orch-check", str(tree), subdir or ".", f"{timeout:g}", command]
    return [*drop_argv(checks_uid(), checks_uid()), *env, "NO_COLOR=1", *wrapper]


def hidden_paths() -> list[Path]:
    """What a check must not see, each hidden under an empty tmpfs: the home folder (agent credentials),
    ORCH_HOME (run folders, the run's repository, agent config dirs, gateway state), the agents' config root."""
    home = Path(os.path.expanduser("~"))
    candidates = {home, orch_home(), agents_dir(), launch_dir().parent}
    return sorted(p for p in candidates if p != Path("/") and p.is_dir())


def sandbox_argv(tree: Path, subdir: str, command: str) -> list[str]:
    """bwrap's argv running `sh -c command` over `tree` (seen at TREE_MOUNT, the only writable place besides
    a private /tmp): no network (an empty network namespace), its own pid namespace (all its processes die
    with it), everything else read-only, hidden_paths() and /run (sockets: Docker's, the bus's) empty, a
    clean environment. As root (above RLIMIT_NPROC) the check runs as the checks' uid inside the sandbox
    (no user namespace then, or that uid would not exist in it), on a tree handed to it (`hand_over`)."""
    bwrap = str(bwrap_binary.find() or "bwrap")
    root = os.geteuid() == 0
    unshare = (
        ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"] if root else []
    )
    argv = [bwrap, *(unshare or ["--unshare-all"]), "--die-with-parent", "--new-session"]
    argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/run", "--tmpfs", "/var/tmp"]
    for path in hidden_paths():
        argv += ["--tmpfs", str(path)]
    # /tmp last among the tmpfs: the home folder may be under it; the tree is bound from the host's view.
    argv += ["--perms", "1777", "--tmpfs", "/tmp", "--perms", "0755", "--dir", str(Path(TREE_MOUNT).parent)]
    argv += ["--bind", str(tree), TREE_MOUNT]  # its parent searchable: the checks' uid resolves absolute paths
    argv += ["--perms", "0777", "--tmpfs", HOME_IN_SANDBOX]
    workdir = f"{TREE_MOUNT}/{subdir}" if subdir else TREE_MOUNT
    argv += ["--chdir", workdir, "--clearenv"]
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": HOME_IN_SANDBOX,
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "CI": "1",
        "NO_COLOR": "1",
    }
    for key, value in env.items():
        argv += ["--setenv", key, value]
    drop = drop_argv(checks_uid(), checks_uid()) if root else []
    return [*argv, *drop, *check_limits(command)]


def check_limits(command: str) -> list[str]:
    """What a check runs as inside its sandbox: niced, at most CHECK_PIDS processes (the shell's own `ulimit`, one
    exec fewer than prlimit: bash spells it -u, dash -p), then the command. RLIMIT_NPROC counts a uid's
    processes: in the sandbox's own user namespace only the check's; as root (no user namespace, the checks' uid)
    every check of that uid on the machine together."""
    limit = f"ulimit -u {CHECK_PIDS} 2>/dev/null || ulimit -p {CHECK_PIDS} || exit 125"
    return ["nice", "-n", str(CHECK_NICE), "/bin/sh", "-c", f"{limit}\n{command}"]


def hand_over(tree: Path) -> None:
    """As root: the tree to the checks' uid, which runs the check (orch.lead.changes.gate.sandbox_argv)."""
    if os.geteuid() != 0:
        return
    for folder, dirs, files in os.walk(tree):
        for path in [folder, *(os.path.join(folder, name) for name in dirs + files)]:
            os.chown(path, checks_uid(), checks_uid(), follow_symlinks=False)


def run_checks(
    checks: Sequence[str],
    tree: Path,
    *,
    subdir: str = "",
    timeout: float = CHECK_TIMEOUT,
    output_bytes: int = OUTPUT_BYTES,
    tmux_socket: str | None = None,
    stopper: Stopper | None = None,
) -> list[CheckResult]:
    """Run each check command (`sh -c`) in the sandbox over `tree` (a disposable copy: the checks may write
    it), from `tree/subdir`; one result per command, in order, whatever each exits with. `tmux_socket`: the
    run's tmux server, which starts the checks' uid when this process cannot (a container's controller).
    `stopper`: ChecksStopped once it is stopped (from another thread), the running check killed."""
    kind = sandbox_kind()
    stopper = stopper or Stopper()
    if kind == "uid":
        # The checks' uid copies the tree itself: it must be able to read it.
        for folder in (tree.parent, tree):
            folder.chmod(0o755)
        if not can_switch(checks_uid()) and tmux_socket is not None:
            return [
                _run_via_tmux(
                    tmux_socket, command, uid_argv(tree, subdir, command, timeout), timeout, output_bytes, stopper
                )
                for command in checks
            ]
        return [
            _run_one(command, uid_argv(tree, subdir, command, timeout), timeout, output_bytes, stopper, grace=30.0)
            for command in checks
        ]
    hand_over(tree)
    return [
        _run_one(command, sandbox_argv(tree, subdir, command), timeout, output_bytes, stopper) for command in checks
    ]


def _run_one(
    command: str, argv: list[str], timeout: float, output_bytes: int, stopper: Stopper, grace: float = 0.0
) -> CheckResult:
    """Run one sandboxed check, keeping its output's tail; past `timeout` (+ `grace`, for a sandbox that
    enforces the limit itself) its process group is killed."""
    stopper.check()
    started = time.monotonic()
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    with stopper.track(proc):
        return _watch(proc, command, started, timeout, output_bytes, stopper, grace)


def _watch(
    proc: subprocess.Popen[bytes],
    command: str,
    started: float,
    timeout: float,
    output_bytes: int,
    stopper: Stopper,
    grace: float,
) -> CheckResult:
    assert proc.stdout is not None
    tail = bytearray()
    total = 0
    timed_out = False
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            left = started + timeout + grace - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            if not sel.select(left):
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            total += len(chunk)
            tail += chunk
            if len(tail) > output_bytes:  # only the tail is kept: a flood costs no memory
                del tail[: len(tail) - output_bytes]
    if timed_out:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    code = proc.wait()
    proc.stdout.close()
    stopper.check()  # killed by a stop: no result, not a failing check
    elapsed = time.monotonic() - started
    if grace and code == 128 + signal.SIGKILL and elapsed >= timeout:  # `timeout -s KILL` inside the sandbox
        timed_out = True
    return CheckResult(
        command=command,
        exit_code=None if timed_out else code,
        seconds=round(elapsed, 3),
        timed_out=timed_out,
        output_tail=tail.decode(errors="replace"),
        output_bytes=total,
    )


def _run_via_tmux(
    socket: str, command: str, argv: list[str], timeout: float, output_bytes: int, stopper: Stopper
) -> CheckResult:
    """One check started by the run's tmux server; the wrapper enforces the time limit itself (a stop ends it
    through stop_uid_checks)."""
    stopper.check()
    ran = via_tmux(socket, argv, timeout + 30.0, output_bytes)
    stopper.check()
    if ran.output.startswith(b"setpriv:"):  # never ran: it must not pass as a check failing on the base
        said = " ".join(ran.output.decode(errors="replace").split())[:200]
        raise UsageError(
            f"the checks' uid could not be started: {said}", hint="checks in a container need strict isolation"
        )
    timed_out = ran.code is None or (ran.code == 128 + signal.SIGKILL and ran.seconds >= timeout)
    return CheckResult(
        command=command,
        exit_code=None if timed_out else ran.code,
        seconds=round(ran.seconds, 3),
        timed_out=timed_out,
        output_tail=ran.output.decode(errors="replace"),
        output_bytes=len(ran.output),
    )


def check_commit(
    repo: RunRepo,
    commit_or_tree: str,
    checks: Sequence[str],
    label: str,
    *,
    timeout: float = CHECK_TIMEOUT,
    output_bytes: int = OUTPUT_BYTES,
    baseline: Sequence[CheckResult] = (),
    stopper: Stopper | None = None,
) -> ChecksRecord:
    """Check out `commit_or_tree` into a fresh temporary folder, run the checks there, remove it; the record
    names the regressions against `baseline`."""
    with tempfile.TemporaryDirectory(prefix="orch-check-") as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        repo.checkout(commit_or_tree, tree)
        results = run_checks(
            checks,
            tree,
            subdir=repo.subdir,
            timeout=timeout,
            output_bytes=output_bytes,
            tmux_socket=_socket(repo),
            stopper=stopper,
        )
    return ChecksRecord(
        tree=label, sandbox=SANDBOXES[sandbox_kind()], results=results, regressions=regressions(baseline, results)
    )


def _socket(repo: RunRepo) -> str | None:
    try:
        return repo.run.info().tmux_socket
    except OrchError:  # a repository being prepared: no run yet
        return None


def baseline(
    repo: RunRepo, checks: Sequence[str], *, timeout: float = CHECK_TIMEOUT, output_bytes: int = OUTPUT_BYTES
) -> ChecksRecord:
    """The checks on the base, once, written to base.checks.json. UsageError when a command does not exist
    (exit 127 on the base)."""
    record = check_commit(repo, repo.base, checks, f"base {repo.base}", timeout=timeout, output_bytes=output_bytes)
    refuse_missing(record)
    atomic_write(repo.run.base_checks, record.model_dump_json(indent=2) + "\n")
    return record


def refuse_missing(record: ChecksRecord) -> None:
    """UsageError for the first check whose command was not found on the base (sh's exit 127)."""
    for result in record.results:
        if result.exit_code == NOT_FOUND:
            said = " ".join(result.output_tail.split())[-160:]
            raise UsageError(
                f"check {result.command!r} does not exist (exit 127 on the base: {said})",
                hint="fix the command in the spec's checks: (it runs with sh -c in the tree's root)",
            )


def gate_checks(
    repo: RunRepo,
    change: Change,
    checks: Sequence[str],
    base_results: Sequence[CheckResult],
    *,
    timeout: float = CHECK_TIMEOUT,
    output_bytes: int = OUTPUT_BYTES,
    stopper: Stopper | None = None,
) -> ChecksRecord:
    """The checks on the change's tree (base + patch), written to changes/<job>/checks.json."""
    if change.tree is None:
        raise ValueError(f"change {change.job} has no tree to check")
    record = check_commit(
        repo,
        change.tree,
        checks,
        f"change {change.job} on {change.base}",
        timeout=timeout,
        output_bytes=output_bytes,
        baseline=base_results,
        stopper=stopper,
    )
    folder = repo.run.change_dir(change.job)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(repo.run.change_checks(change.job), record.model_dump_json(indent=2) + "\n")
    return record


def regressions(base: Sequence[CheckResult], now: Sequence[CheckResult]) -> list[str]:
    """Commands that passed on the base and do not pass now (a check failing on the base may keep failing)."""
    passed = {r.command for r in base if r.passed}
    return [r.command for r in now if r.command in passed and not r.passed]

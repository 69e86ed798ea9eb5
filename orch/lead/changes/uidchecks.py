"""The checks in a run's container, where bubblewrap cannot make its namespaces (Docker's seccomp profile refuses
its user namespace): as the checks' uid under strict isolation, as the run's own uid under shared isolation.

- **The checks' uid** (orch.run.uids.checks_uid), no worker's, which the container's firewall cuts off the
  network (loopback included), with no groups or capabilities, on its own copy of the tree, each file at most the
  disk cap, its processes all killed after each check (`kill -1` as that uid reaches no other). Started from here
  when this process may switch uid, else through the run's tmux server (the one process of a strict run that
  keeps SETUID: a controller reached by `docker exec` holds no capability). `probe` starts `true` that way: a run
  where it does not work has its checks refused before any runs, never failed as if the project's tests did.
- **The run's own uid**, under shared isolation only. There nothing of the run may switch uid (neither the
  controller nor its tmux server holds CAP_SETUID), and every worker already is the run's uid: a check running as
  it runs what a writer wrote as the identity the writer already has, no other (not the checks' uid's network
  cut-off, not a reviewer's: under shared isolation the unit of isolation is the run). It gets its own copy of
  the tree in a folder of its own, the disk cap per file, a clean environment carrying MARK (a token of the
  check's own), and after it ends every process of its tree or carrying its token is killed before its result is
  read. What it reaches that a check of a strict run does not: the egress allowlist (the workers' network) and
  the run's files, as every worker of the run already does; a process that drops MARK and leaves its tree
  outlives the check, as a worker's own processes may.

Never the run's uid under strict isolation: a strict run whose checks' uid cannot be started is refused.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from orch import procs
from orch.container.egress import not_cut_off, read_report
from orch.errors import WaitTimeoutError
from orch.jobs.changes import CheckResult
from orch.lead.changes.checkwatch import UID_AREAS, CheckLimits, Meter, owned, run_one
from orch.lead.changes.stopper import Stopper
from orch.lead.changes.switch import can_switch, via_tmux
from orch.run.uids import checks_uid, drop_argv
from orch.settings.internal import CHECK_TOKEN
from orch.waits import wait_until

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

# Run as the run's own uid (shared isolation): the same, in the folder the controller made for it ($6), but no
# `kill -1` (it would reach the controller and every worker): the controller kills the check's processes itself.
RUN_WRAPPER = """ulimit -f "$5" || exit 125
cp -a "$1/." "$6/" || { echo "orch: the tree could not be copied for the check"; exit 125; }
cd "$6/$2" || exit 125
HOME="$6" TMPDIR="$6" timeout -s KILL "$3" sh -c "$4"
exit $?"""

MARK = CHECK_TOKEN.name
"""The variable each check run as the run's uid carries, its value a token of that check's own."""
SETPRIV_FAILED = 127
"""setpriv's exit code when it cannot switch (SETPRIV_EXIT_PRIVERR), its line starting `setpriv:`."""
KILL_WAIT = 10.0
"""How long the processes of a check killed may take to be gone."""


def probe(tmux_socket: str | None) -> str | None:
    """None when a check can run as the checks' uid here (the firewall cuts it off the network, and `true` ran
    as it, from here or through the run's tmux server); else why not, in one line."""
    report = read_report() or {}
    if report.get("checks_uid") != checks_uid():
        return not_cut_off(checks_uid())  # refused on the host already when it knew (egress.refuse_open_checks)
    if can_switch(checks_uid()):
        return None
    if tmux_socket is None:
        return (
            f"cannot start a process as uid {checks_uid()}: no capability to switch uid here, and no run's tmux server"
        )
    try:
        ran = via_tmux(tmux_socket, [*drop_argv(checks_uid(), checks_uid()), "true"], 30.0, 512)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot start a process as uid {checks_uid()} through the run's tmux server: {exc}"
    if ran.code != 0:
        said = " ".join(ran.output.decode(errors="replace").split())[:160] or f"exit {ran.code}"
        return f"cannot start a process as uid {checks_uid()}, nor can the run's tmux server ({said})"
    return None


def switch_failed(result: CheckResult) -> bool:
    """A check that ended as setpriv does when it could not switch to the checks' uid (no check ran)."""
    return result.exit_code == SETPRIV_FAILED and result.output_tail.lstrip().startswith("setpriv:")


def uid_argv(tree: Path, subdir: str, command: str, limits: CheckLimits) -> list[str]:
    """setpriv to the checks' uid (no groups, no capabilities, no-new-privs), a clean environment, UID_WRAPPER."""
    wrapper = [UID_WRAPPER, "orch-check", str(tree), subdir or ".", f"{limits.timeout:g}", command, _blocks(limits)]
    return [*drop_argv(checks_uid(), checks_uid()), *_clean_env(), "/bin/sh", "-c", *wrapper]


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


def run_as_run(command: str, tree: Path, subdir: str, limits: CheckLimits, stopper: Stopper) -> CheckResult:
    """One check as this process's own uid (a shared run's: see the module's doc), on its own copy of `tree`;
    every process of its tree or carrying its token is gone before this returns."""
    token = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="orch-check-") as scratch:
        wrapper = [RUN_WRAPPER, "orch-check", str(tree), subdir or ".", f"{limits.timeout:g}", command]
        argv = [*_clean_env(f"{MARK}={token}"), "/bin/sh", "-c", *wrapper, _blocks(limits), scratch]
        first: list[int] = []

        def watch(pid: int) -> tuple[Meter, Callable[[], None]]:
            first.append(pid)

            def meter() -> tuple[int, int]:
                pids = sorted(set(procs.tree(pid)) | set(marked(token)))
                return procs.load(pids).memory, owned(Path(scratch), os.getuid()) + procs.held_files(pids)

            def kill() -> None:
                kill_marked(token, pid)

            return meter, kill

        try:
            return run_one(command, argv, limits, stopper, watch)
        finally:
            kill_marked(token, first[0] if first else None)


def marked(token: str | None) -> list[int]:
    """This uid's processes carrying MARK: with `token`, that check's; None: any check's (but this process)."""
    out = []
    for pid in procs.of_uids({os.getuid()}):
        value = procs.env_var(pid, MARK) if pid != os.getpid() else None
        if isinstance(value, str) and (token is None or value == token):
            out.append(pid)
    return out


def kill_marked(token: str | None, pid: int | None = None) -> list[int]:
    """SIGKILL the processes of a check run as the run's uid (`token`'s, and the tree under `pid`; None: every
    check's) until none is left; their pids."""
    killed: set[int] = set()

    def gone() -> bool:
        left = [p for p in (procs.tree(pid) if pid is not None else []) + marked(token) if procs.alive(p)]
        for p in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGKILL)
        killed.update(left)
        return not left

    with contextlib.suppress(WaitTimeoutError):  # an unkillable one (in the kernel): the next check's look sees it
        wait_until(gone, KILL_WAIT, "the processes of a check killed to be gone")
    return sorted(killed)


def _clean_env(*extra: str) -> list[str]:
    path = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
    return ["env", "-i", f"PATH={path}", "LANG=C.UTF-8", "CI=1", "NO_COLOR=1", *extra]


def _blocks(limits: CheckLimits) -> str:
    return "unlimited" if limits.disk is None else str(max(1, limits.disk // 512))

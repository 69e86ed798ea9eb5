"""What this machine needs before orch downloads anything, checked with the standard library alone: Python and
its venv module, tmux, bubblewrap and the user namespaces it makes, npm with Node for the agents from npm, git,
and a Docker engine when asked. `python3 -m orch.prereqs` runs them from a source tree before its venv exists
(scripts/setup.sh), `orch setup` before it installs an agent, `orch doctor` and the runs through the same
functions: one place for each check and its fix.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orch.errors import UsageError
from orch.settings.user import BWRAP
from orch.versions import TMUX_MIN_VERSION

PYTHON_MIN = (3, 11)
NODE_MIN = 18
"""What npm needs to install the agents (Debian 12's is 18); Gemini CLI itself asks for 20+ when it runs
(docs/agents/gemini.md), which the worker image brings along."""
PROBE_TIMEOUT = 20.0
SHARED = "or run shared: `orch up --isolation shared`, a spec's `verification.isolation: shared`"
USERNS_ON = (
    "enable unprivileged user namespaces (sysctl -w kernel.unprivileged_userns_clone=1; on Ubuntu "
    "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0)"
)
USERNS_FIX = f"{USERNS_ON}, {SHARED}"
TMUX_FIX = "apt-get install tmux"


@dataclass(frozen=True)
class Missing:
    """A prerequisite this machine lacks: what, and how to get it."""

    what: str
    fix: str

    def line(self) -> str:
        return f"{self.what} (hint: {self.fix})"


def _run(argv: list[str], timeout: float = 10.0) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _version(text: str) -> tuple[int, int] | None:
    match = re.search(r"(\d+)\.(\d+)", text)
    return (int(match[1]), int(match[2])) if match else None


def tmux_version() -> str:
    """The tmux version ("3.3a"); UsageError if tmux is missing or older than orch supports."""
    path = shutil.which("tmux")
    if path is None:
        raise UsageError("tmux is not installed (not found on PATH)", hint=TMUX_FIX)
    done = _run([path, "-V"])
    if done is None:
        raise UsageError(f"cannot run {path} -V", hint=TMUX_FIX)
    version = done.stdout.strip().removeprefix("tmux ")
    found = _version(version)
    if done.returncode != 0 or found is None:
        raise UsageError(f"cannot read the tmux version from {done.stdout.strip()!r}", hint=TMUX_FIX)
    if found < TMUX_MIN_VERSION:
        need = ".".join(map(str, TMUX_MIN_VERSION))
        raise UsageError(f"tmux {version} is too old (need {need} or newer)", hint=TMUX_FIX)
    return version


def bwrap_path() -> Path | None:
    """The bubblewrap executable, the one place that finds it: ORCH_BWRAP, else `bwrap` on PATH; None if none."""
    found = BWRAP.get() or shutil.which("bwrap")
    return Path(found) if found and Path(found).is_file() else None


def bwrap_binary() -> Path:
    """`bwrap_path()`, or a UsageError saying how to install it."""
    found = bwrap_path()
    if found is None:
        raise UsageError(
            "strict isolation on this machine needs bubblewrap, which is not installed",
            hint=f"apt-get install bubblewrap (or set {BWRAP.name}), {SHARED}",
        )
    return found


def bwrap_namespaces() -> list[str]:
    # As root bwrap needs no user namespace; as anyone else it is what makes the others possible.
    user = [] if os.geteuid() == 0 else ["--unshare-user"]
    return [*user, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]


def bwrap_works() -> str:
    """bubblewrap makes the namespaces a strict worker's sandbox needs: its version line, or a UsageError
    saying why not and how to fix it (user namespaces, AppArmor)."""
    bwrap = bwrap_binary()
    probe = [str(bwrap), *bwrap_namespaces(), "--ro-bind", "/", "/", "--proc", "/proc", "--", "true"]
    done = _run(probe, PROBE_TIMEOUT)
    if done is None:
        raise UsageError(f"strict isolation: {bwrap} cannot run", hint=USERNS_FIX)
    if done.returncode != 0:
        said = next((ln.strip() for ln in done.stderr.splitlines() if ln.strip()), f"exit {done.returncode}")
        raise UsageError(
            f"strict isolation needs user namespaces, and {bwrap} could not make them: {said}", hint=USERNS_FIX
        )
    version = _run([str(bwrap), "--version"])
    return ((version.stdout.strip() if version else "") or "bwrap") + f" ({bwrap})"


def python() -> list[Missing]:
    if sys.version_info[:2] < PYTHON_MIN:
        need = ".".join(map(str, PYTHON_MIN))
        return [Missing(f"Python {sys.version.split()[0]} is too old (need {need}+)", f"install python{need}")]
    try:
        import ensurepip  # noqa: F401  (Debian ships venv's pip apart, in python3-venv)
        import venv  # noqa: F401
    except ImportError:
        return [Missing("Python's venv module is missing", "apt-get install python3-venv")]
    return []


def node() -> list[Missing]:
    """npm, and a Node.js it can install the agents with."""
    if shutil.which("npm") is None:
        return [Missing("npm is not installed (agent CLIs come from npm)", f"apt-get install npm (Node {NODE_MIN}+)")]
    done = _run(["node", "--version"])
    found = _version(done.stdout) if done is not None else None
    if found is None or found[0] < NODE_MIN:
        said = done.stdout.strip() if done is not None else "no node"
        return [Missing(f"Node.js {said} is too old (need {NODE_MIN}+)", f"install Node {NODE_MIN}+ (nodesource)")]
    return []


def docker() -> list[Missing]:
    """A Docker engine that answers: its socket, or DOCKER_HOST (a remote one is asked when it is used)."""
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        return []
    path = host.removeprefix("unix://") or "/var/run/docker.sock"
    if not Path(path).exists():
        return [Missing(f"no Docker engine at {path}", "apt-get install docker.io, or point DOCKER_HOST at one")]
    return []


def _checked(check: Callable[[], object]) -> list[Missing]:
    try:
        check()
    except UsageError as exc:
        return [Missing(exc.message, exc.hint or "")]
    return []


def missing(local: bool = True, npm: bool = True, with_docker: bool = False) -> list[Missing]:
    """What this machine lacks: with `local`, for a run on it (tmux, bubblewrap and its namespaces, git); with
    `npm`, to install the agents that come from npm; with `with_docker`, a Docker engine."""
    found = python()
    if local:
        found += [*_checked(tmux_version), *_checked(bwrap_works)]
        if shutil.which("git") is None:
            found.append(Missing("git is not installed (specs with writers, `orch apply`)", "apt-get install git"))
    if npm:
        found += node()
    if with_docker:
        found += docker()
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m orch.prereqs", description=__doc__)
    parser.add_argument("--no-npm", action="store_true", help="no agent from npm will be installed")
    parser.add_argument("--docker", action="store_true", help="a Docker engine is needed too")
    args = parser.parse_args(argv)
    found = missing(npm=not args.no_npm, with_docker=args.docker)  # setup.sh: orch runs on this machine
    for item in found:
        print(f"orch: missing: {item.line()}", file=sys.stderr)
    return 2 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Starting, finding, stopping and controlling a run's gateway from the caller's side.

`start_gateway` spawns `python -m orch.gateway` detached (its own session), hands it the boot line on
stdin (the credential never sits in argv, env or a file) and waits for its word on a pipe that its handle
file is written (or the pipe's EOF: it died). The caller keeps
the returned GatewayHandle, control key included, with `save_handle` (0600); `GatewayClient` speaks the
control API with it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import SecretStr, ValidationError

from orch import procs
from orch.errors import NotFoundError, OrchError, UsageError
from orch.gateway.modeldir import GatewayBoot, GatewayBudget
from orch.gateway.wire import boot_line
from orch.run.files import atomic_write
from orch.run.records import Strict
from orch.settings.internal import gateway_handle
from orch.waits import read_line, wait_until

START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0


class GatewayHandle(Strict):
    url: str
    pid: int
    control_key: SecretStr


def handle_path(run_name: str) -> Path:
    """Where a run's handle lives (orch.settings.internal.gateway_handle): $ORCH_HOME/gateways/ (made 0700 by whoever
    writes a handle there: `save_handle`, `start_gateway`), or a run's container's temp dir."""
    return gateway_handle(run_name)


def state_path(handle: Path) -> Path:
    """The gateway supervisor's private state beside its handle (url, live worker tokens and jobs), so a
    gateway started again after its supervisor died resumes them (orch.gateway.supervisor)."""
    return handle.with_name(handle.name + ".tokens")


def gateway_alive(handle: GatewayHandle) -> bool:
    """Its supervisor process still runs (reaped first if it was our own child). A pid of another uid
    (the container's gateway, seen by the run's uid) counts as running: only its owner could tell."""
    _reap(handle.pid)
    try:
        os.kill(handle.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _is_our_gateway(handle.pid)


def _log_tail(log: Path) -> str:
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    return lines[-1][:300] if lines else "nothing logged"


def _read_handle_file(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "url" in data and "pid" in data else None


def start_gateway(
    boot: GatewayBoot,
    handle: Path,
    log: Path,
    argv_prefix: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> GatewayHandle:
    """Start a gateway for `boot`; it writes its url and pid to `handle`, its stderr to `log`. `env`: its
    environment (default this process's); the credentials come in the boot line, never from it."""
    handle.unlink(missing_ok=True)  # a stale handle would read as "ready"
    handle.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    log.parent.mkdir(parents=True, exist_ok=True)
    read_fd, write_fd = os.pipe()
    argv = [*argv_prefix, sys.executable, "-m", "orch.gateway", "--handle", str(handle), "--ready-fd", str(write_fd)]
    try:
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=out, stderr=out, start_new_session=True, env=env,
                pass_fds=(write_fd,),
            )  # fmt: skip
    finally:
        os.close(write_fd)  # the gateway holds the only write end: EOF means it is gone
    try:
        assert proc.stdin is not None
        try:
            proc.stdin.write(boot_line(boot).encode() + b"\n")
            proc.stdin.close()
        except BrokenPipeError:
            pass  # it died at once: reported below with its log
        said = read_line(read_fd, START_TIMEOUT, f"the model gateway's handle file {handle}")
    finally:
        os.close(read_fd)
    data = _read_handle_file(handle) if said else None
    if data is None:
        raise OrchError(f"the model gateway exited at start (exit {proc.wait()}): {_log_tail(log)}")
    return GatewayHandle(url=str(data["url"]), pid=int(data["pid"]), control_key=boot.control_key)


def save_handle(path: Path, handle: GatewayHandle) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = {**handle.model_dump(mode="json"), "control_key": handle.control_key.get_secret_value()}
    atomic_write(path, json.dumps(data) + "\n", mode=0o600)


def load_handle(path: Path) -> GatewayHandle:
    try:
        return GatewayHandle.model_validate_json(path.read_text())
    except FileNotFoundError:
        raise NotFoundError(f"no gateway handle at {path}", hint="is the run's gateway started?") from None
    except (ValidationError, ValueError) as exc:
        raise UsageError(f"gateway handle {path} is malformed: {str(exc).splitlines()[0]}") from None


def _is_our_gateway(pid: int) -> bool:
    """It runs (not a zombie) `python -m orch.gateway`, or a container's gateway keeper: a container's handle
    holds the keeper (orch.container.gatewaykeeper), which outlives supervisors."""
    argv = procs.cmdline(pid)
    return ("orch.gateway" in argv or "orch.container.gatewaykeeper" in argv) and procs.alive(pid)


def stop_gateway(handle_path: Path) -> bool:
    """SIGTERM the gateway named in the handle file (only if that pid still runs orch.gateway), wait for it
    to go, remove the file. False if there was nothing to stop."""
    data = _read_handle_file(handle_path)
    state_path(handle_path).unlink(missing_ok=True)  # a supervisor killed earlier left it: the run is over
    if data is None:
        return False
    pid = int(data["pid"])
    stopped = False
    if _is_our_gateway(pid):
        os.kill(pid, signal.SIGTERM)
        # Gone or a zombie: not "no longer orch.gateway", which an exiting process (its cmdline emptied)
        # already is while it still runs.
        wait_until(lambda: _reap(pid) or not procs.alive(pid), STOP_TIMEOUT, f"gateway pid {pid} to exit")
        stopped = True
    handle_path.unlink(missing_ok=True)
    return stopped


def _reap(pid: int) -> bool:
    """Reap it if it is our own child (start_gateway in this process); True once it is gone."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return done == pid


class GatewayClient:
    """The controller's side of `/_orch/`: a small sync client."""

    def __init__(self, handle: GatewayHandle, timeout: float = 10.0) -> None:
        self.handle, self.timeout = handle, timeout

    def _call(self, method: str, path: str, payload: object = None) -> dict[str, Any]:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(self.handle.url + path, data=data, method=method)
        request.add_header("x-orch-control", self.handle.control_key.get_secret_value())
        request.add_header("content-type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                result = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode(errors="replace")
            raise OrchError(f"gateway {method} {path} failed: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise OrchError(f"gateway {method} {path} failed: {exc}") from None
        return result if isinstance(result, dict) else {}

    def mint_token(self, worker: int, agent: str | None = None) -> str:
        """A fresh token for worker n (revoking its last), bound to its agent kind: it reaches only the
        upstream of that kind (a gateway of several upstreams requires one)."""
        payload = None if agent is None else {"agent": agent}
        return str(self._call("POST", f"/_orch/tokens/{worker}", payload)["token"])

    def set_budget(self, budget: GatewayBudget) -> None:
        self._call("PUT", "/_orch/budget", budget.model_dump())

    def set_job(self, worker: int, job: str | None) -> None:
        self._call("PUT", f"/_orch/jobs/{worker}", {"job": job})

    def settle(self) -> None:
        """Return once every exchange answered so far is in usage.json, the ledger and the recording (the
        gateway writes them just after each answer, off the worker's path)."""
        self._call("POST", "/_orch/settle")

    def info(self) -> dict[str, Any]:
        """What `/_orch/health` says: ok, run, life (server children so far), pid (the serving child),
        offline (it serves the scripted model or a replay)."""
        return self._call("GET", "/_orch/health")

    def health(self) -> bool:
        try:
            return bool(self.info().get("ok"))
        except OrchError:
            return False

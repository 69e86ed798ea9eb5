"""Offline runs: the run's own scripted model server, so real agents run without credentials."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from orch.errors import SandboxError
from orch.run.folder import RunFolder
from orch.waits import wait_for_paths

START_TIMEOUT = 20.0


def start_model_server(run: RunFolder) -> str:
    """Start the scripted model server as a detached process on 127.0.0.1; return its URL.

    One that outlived the run's tmux server (a relaunch) is stopped first: it holds no state."""
    stop_model_server(run)
    run.model_server_url.unlink(missing_ok=True)
    log = (run.logs_dir / "modelserver.log").open("ab")
    with log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "orch.offline.modelserver",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--url-file",
                str(run.model_server_url),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    run.model_server_pid.write_text(f"{proc.pid}\n")
    if wait_for_paths([run.model_server_url], START_TIMEOUT) or proc.poll() is not None:
        stop_model_server(run)
        raise SandboxError("the scripted model server did not start", hint=f"see {run.logs_dir}/modelserver.log")
    return run.model_server_url.read_text().strip()


def stop_model_server(run: RunFolder) -> None:
    try:
        pid = int(run.model_server_pid.read_text())
        # The pid may be another process by now (a reboot, a new container): only ours is stopped.
        ours = b"orch.offline.modelserver" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        ours = False
    if ours:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    run.model_server_pid.unlink(missing_ok=True)

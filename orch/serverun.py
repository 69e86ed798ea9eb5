"""`orch serve-run NAME`: the controller as a run container's main process.

Inside the container (after orch.containerinit dropped privileges) it reads run.json from the mounted
run folder, launches tmux and the workers with the same code as a local run (fleet.launch), says so on
stdout, and then stays until SIGTERM (`orch kill`, `docker stop`), when it stops tmux and the model
server, marks the run stopped and exits 0. If the launch fails it marks the run failed, prints one
line why, and exits 1: the host then removes the container.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from types import FrameType

from orch import fleet
from orch.agents import get_adapter
from orch.egress import read_report
from orch.errors import OrchError, UsageError
from orch.models import ControllerEvent, RunStatus
from orch.offline import stop_model_server
from orch.workspace import RunFolder

READY_LINE = "orch: serve-run: running"  # docker_sandbox.READY_LINE: the host waits for it on remote engines
# Claude Code keeps a session's transcript under <config dir>/projects/: pointing that into the run
# folder lets a new container resume the session after the old one died (the config dir is on tmpfs).
SESSION_SUBDIR = {"claude": "projects"}


class Stop(BaseException):
    """SIGTERM/SIGINT arrived."""


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise Stop()


def prompts_from_env() -> dict[int, str]:
    raw = os.environ.get("ORCH_PROMPTS")
    if not raw:
        return {}
    try:
        data = json.loads(raw)
        return {int(k): str(v) for k, v in data.items()}
    except (ValueError, AttributeError) as exc:
        raise UsageError(f"ORCH_PROMPTS is not a JSON object of worker -> prompt: {exc}") from None


def link_sessions(run: RunFolder, agent: str, workers: int) -> None:
    """Make each worker's agent session store live in the run folder (sessions/agent-N)."""
    sub = SESSION_SUBDIR.get(agent)
    if sub is None:
        return
    for n in range(1, workers + 1):
        store = run.sessions(n)
        store.mkdir(parents=True, exist_ok=True)
        cfg = run.config_dir(n)
        cfg.mkdir(parents=True, exist_ok=True, mode=0o700)
        link = cfg / sub
        if not link.is_symlink() and not link.exists():
            link.symlink_to(store, target_is_directory=True)


def serve(name: str, boot_timeout: float, resume: bool) -> int:
    run = RunFolder.for_name(name)
    info = run.info()
    adapter = get_adapter(info.agent)
    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        report = read_report()
        if report is not None:
            run.log_event(ControllerEvent(event="egress", data=report))
        link_sessions(run, info.agent, info.workers)
        try:
            fleet.launch(run, info, adapter, prompts_from_env(), boot_timeout, resume=resume)
        except OrchError as exc:
            _teardown(run)
            info.status = RunStatus.FAILED
            run.write_info(info)
            print(f"orch: error: {exc.one_line()}", file=sys.stderr, flush=True)
            return 1
        print(f"{READY_LINE}: {info.workers} {info.agent} worker(s)", flush=True)
        while True:
            signal.pause()
    except Stop:
        fleet.kill(run)  # stops tmux and the model server, marks the run stopped, logs who
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _teardown(run: RunFolder) -> None:
    fleet.server_for(run.info()).kill()
    stop_model_server(run)

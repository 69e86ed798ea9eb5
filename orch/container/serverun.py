"""`orch serve-run NAME`: the controller as a run container's main process.

Inside the container (after orch.container.init dropped privileges) it reads run.json from the mounted
run folder, launches tmux and the workers with the same code as a local run (launch.launch), says so on
stdout, and then stays until SIGTERM (`orch kill`, `docker stop`), when it stops tmux and the model
server, marks the run stopped and exits 0. If the launch fails it marks the run failed, prints one
line why, and exits 1: the host then removes the container. With `--drive` (compose's `lead`, whose
run the init prepared) it runs the controller once the workers are up, and exits with its code.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType

from orch import procs
from orch.agents.registry import get_adapter
from orch.container.egress import read_report
from orch.container.layout import WORKDIR
from orch.container.owners import remove_as_owners, stop_as
from orch.contracts import UpRequest
from orch.errors import OrchError
from orch.fleet import control, launch, rungateway
from orch.fleet.confinement import Confinement
from orch.gateway.process import handle_path, load_handle
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.listeners import BusServer
from orch.run.records import ControllerEvent, Isolation, RunInfo, RunStatus
from orch.run.uids import can_switch_uids, drop_argv
from orch.settings.compose import AGENT, MODEL, OFFLINE, PERMISSION_MODE, WORKERS
from orch.settings.internal import PROMPTS
from orch.waits import wait_until

READY_LINE = "orch: serve-run: running"  # docker_container.wait_running waits for it on remote engines
STOP_TIMEOUT = 10.0  # seconds the controller gets to stop on SIGTERM before the workers are stopped


class Stop(BaseException):
    """SIGTERM/SIGINT arrived."""


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise Stop()


def compose_request(
    name: str,
    workers: int | None = None,
    agent: str | None = None,
    workdir: Path = Path(WORKDIR),
    permission_mode: str | None = None,
    model: str | None = None,
    offline: bool = False,
    strict: bool = False,
) -> UpRequest:
    """The fleet `serve-run --create` makes (compose's `fleet`): what is given, else the ORCH_* settings.
    `strict`: strict isolation when its agent can run so (the container's init made the folder, so it
    could give each worker its files)."""
    agent = agent or AGENT.get()
    return UpRequest(
        name=name,
        workers=workers if workers is not None else WORKERS.get(),
        agent=agent,
        workdir=workdir,
        permission_mode=permission_mode or PERMISSION_MODE.get(),
        model=model or MODEL.get(),
        offline=offline or OFFLINE.get(),
        isolation=Isolation.STRICT if strict and get_adapter(agent).can_run_strict() else Isolation.SHARED,
    )


def link_sessions(run: RunFolder, agents: Mapping[int, str]) -> None:
    """Make each worker's agent session store live in the run folder (sessions/agent-N): the config dir
    is on the container's tmpfs, so this lets a new container resume the session after the old one died.
    `agents`: each worker's agent."""
    for n, agent in agents.items():
        sessions = get_adapter(agent).facts.sessions
        if sessions is None:
            continue
        store = run.sessions(n)
        store.mkdir(parents=True, exist_ok=True)
        cfg = run.config_dir(n)
        cfg.mkdir(parents=True, exist_ok=True, mode=0o700)
        link = cfg / sessions.subdir
        link.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # a store below the config dir (.gemini/tmp)
        if not link.is_symlink() and not link.exists():
            link.symlink_to(store, target_is_directory=True)


def _link_sessions(run: RunFolder, info: RunInfo) -> None:
    if info.isolation is not Isolation.STRICT:  # strict: each worker links its own (orch.fleet.become)
        link_sessions(run, {n: info.agent_of(n) for n in range(1, info.workers + 1)})


def controller_argv(name: str) -> list[str]:
    """compose's `lead`: the controller, `orch run --resume NAME`, without the capabilities this process
    keeps for the run's tmux server (it starts each pane as its worker): the controller drives the panes
    through that server, as a host-driven run's controller (a `docker exec`) does, and holds none."""
    shed = drop_argv(os.getuid(), os.getgid()) if can_switch_uids() else []
    return [*shed, "orch", "run", "--resume", name]


def serve(
    name: str,
    boot_timeout: float,
    resume: bool,
    confine: Callable[[RunInfo], Confinement],
    create: UpRequest | None = None,
    drive: bool = False,
    failed: int = 1,
) -> int:
    """Launch the run's workers, then stay until SIGTERM. The exit code of the container. `confine`: how a run's
    workers are kept apart, as its backend says (orch.backends.registry.confinement_of).

    `create` (compose, or any container started without a host-made run folder): make the run folder
    from this request first; if it exists already, resume the run instead. `drive` (compose's `lead`):
    once the workers run, run the controller (`controller_argv`) and return its exit code. `failed`: the
    exit code when the workers do not start.
    """
    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    run = RunFolder.for_name(name)
    posts: BusServer | None = None
    controller: subprocess.Popen[bytes] | None = None
    held = hold_serve_lock(run) if run.root.is_dir() else None
    try:
        try:
            if create is not None and not run.exists():
                run, info = _create(create, boot_timeout, confine)
                held = hold_serve_lock(run)
            else:
                info = run.info()
                # compose's new run, made by the init for this start: if it does not start, nothing stays.
                fresh = (create is not None or drive) and info.status is RunStatus.STARTING
                if info.isolation is Isolation.STRICT:  # before the workers: their first posts go here
                    posts = BusServer(run).start()
                try:
                    _launch(run, info, confine(info), boot_timeout, resume or create is not None)
                except OrchError:
                    if fresh and _discard(run):
                        print(f"orch: run {name!r} did not start: nothing of it is left", file=sys.stderr)
                    raise
        except OrchError as exc:
            print(f"orch: error: {exc.one_line()}", file=sys.stderr, flush=True)
            return failed
        print(f"{READY_LINE}: {info.fleet()}", flush=True)
        if drive:
            controller = subprocess.Popen(controller_argv(name))
            return controller.wait()
        while True:
            signal.pause()
    except Stop:
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)  # a second SIGTERM must not cut the teardown short
        if controller is not None and controller.poll() is None:
            controller.terminate()  # its state is saved as it goes: `--resume` continues the run
            with contextlib.suppress(subprocess.TimeoutExpired):
                controller.wait(timeout=STOP_TIMEOUT)
        if run.exists():
            control.kill(run, confine(run.info()))  # stops tmux and the model server, marks it stopped, logs who
        return 0
    finally:
        if held is not None:
            os.close(held)
        if posts is not None:
            posts.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def hold_serve_lock(run: RunFolder) -> int:
    """The run's serve lock, held (shared) for as long as the returned descriptor is open: compose's init
    in another container on the same runs volume then refuses to replace or relaunch the run."""
    fd = os.open(run.serve_lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    fcntl.flock(fd, fcntl.LOCK_SH)
    return fd


def _create(
    req: UpRequest, boot_timeout: float, confine: Callable[[RunInfo], Confinement]
) -> tuple[RunFolder, RunInfo]:
    """A run folder made here, as launch.up makes it (nothing is left behind if the boot fails), with the
    agents' session stores linked into it first so a later container can resume them."""
    _, info = launch.plan(req)
    run = RunFolder.for_name(req.name)
    run.create(info)
    try:
        _log_egress(run)
        _link_sessions(run, info)
        launch.launch(run, info, confine(info), req.prompts, boot_timeout)
    except BaseException:
        _teardown(run)
        run.remove()
        raise
    return run, run.info()


def _launch(run: RunFolder, info: RunInfo, confinement: Confinement, boot_timeout: float, resume: bool) -> None:
    """Launch in a run folder the host made (or an earlier life of the run left)."""
    _log_egress(run)
    _link_sessions(run, info)
    info.status = RunStatus.STARTING
    try:
        launch.launch(run, info, confinement, PROMPTS.get(), boot_timeout, resume=resume)
    except OrchError:
        _teardown(run)
        info.status = RunStatus.FAILED
        run.write_info(info)
        raise


def _discard(run: RunFolder) -> bool:
    """A compose run whose first launch failed (the init made its folder, gave `model/` to the gateway and
    each worker its files): removed, as a run that fails before the init hands over is. The init's gateway
    is stopped and the other uids' folders emptied as their owners, which a strict run's uid may start
    processes as (it keeps SETUID to start each pane as its worker); False where it may not (shared), and
    the run stays `failed`."""
    if not can_switch_uids() or not run.root.is_dir():
        return False
    with contextlib.suppress(OrchError, OSError):
        keeper = load_handle(handle_path(run.name)).pid
        gateway = run.model_dir.stat().st_uid
        if gateway != os.geteuid():
            stop_as(gateway, keeper)
            wait_until(lambda: not procs.alive(keeper), STOP_TIMEOUT, "the run's gateway to stop")
    try:
        remove_as_owners(run.root)
    except OSError as exc:
        print(f"orch: run {run.name!r} could not be removed: {exc}", file=sys.stderr, flush=True)
        return False
    run.remove()  # its config dirs
    handle_path(run.name).unlink(missing_ok=True)
    return True


def _log_egress(run: RunFolder) -> None:
    report = read_report()
    if report is not None:
        run.log_event(ControllerEvent(event=Event.EGRESS, data=report))


def _teardown(run: RunFolder) -> None:
    launch.server_for(run.info()).kill()
    rungateway.stop(run.name)

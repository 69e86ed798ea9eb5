"""A fleet started on this machine's tmux (the host, or the run's container): plan, boot, dialogs, restarts.
Each worker's pane is confined as the run's confinement says (orch.fleet.confinement): the backend chose it."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable
from pathlib import Path

import orch
from orch import __version__, procs
from orch.agents.registry import check_permission_mode, get_adapter
from orch.contracts import AgentAdapter, LaunchSpec, UpRequest, WorkerContext
from orch.errors import SandboxError, UsageError, WaitTimeoutError
from orch.fleet import caps, rungateway, stopping
from orch.fleet.booting import BOOT_TIMEOUT, wait_booted
from orch.fleet.confinement import Confinement
from orch.fleet.supervisor import supervisor_under
from orch.fleet.tmux import PaneInfo, TmuxServer, check_tmux
from orch.fleet.workerprocs import WorkerProcesses, processes_by_worker
from orch.run.events import Event
from orch.run.folder import RunFolder, validate_name, validate_worker_count
from orch.run.records import ControllerEvent, Isolation, LocalRunInfo, RunInfo, RunStatus
from orch.waits import wait_until

log = logging.getLogger(__name__)

EXIT_TIMEOUT = 10.0  # seconds for a dead fleet's agents to run their exit hooks


def socket_name(name: str) -> str:
    return f"orch-{name}"


def server_for(info: RunInfo) -> TmuxServer:
    return TmuxServer(info.tmux_socket)


def plan(req: UpRequest) -> tuple[AgentAdapter, LocalRunInfo]:
    """Validate a request and describe the run it asks for, on this machine; touches nothing. The adapter
    returned is the run's first kind (`agent`); a mixed fleet's others are checked alike."""
    validate_name(req.name)
    validate_worker_count(req.workers)
    adapter = get_adapter(req.agent)
    workdir = req.workdir.expanduser()
    if not workdir.is_dir():
        raise UsageError(f"workdir does not exist: {workdir}", hint="create it or pass another --workdir")
    for n in [*req.prompts, *req.worker_models, *req.worker_agents]:
        if not 1 <= n <= req.workers:
            raise UsageError(f"prompt, model or agent for worker {n} is out of range", hint=f"use 1 to {req.workers}")
    agents = {n: kind for n, kind in req.worker_agents.items() if kind != adapter.facts.name}
    for kind in {adapter.facts.name, *agents.values()}:
        other = get_adapter(kind)
        if req.isolation is Isolation.STRICT and not other.can_run_strict():
            raise UsageError(
                f"agent {other.facts.name} cannot run under strict isolation yet",
                hint="use --isolation shared (or the spec's `verification.isolation: shared`)",
            )
        mode = req.permission_mode or other.facts.default_permission_mode
        check_permission_mode(other, mode)
    info = LocalRunInfo(
        name=req.name,
        agent=adapter.facts.name,
        workers=req.workers,
        workdir=str(workdir.resolve()),
        permission_mode=req.permission_mode or adapter.facts.default_permission_mode,
        model=req.model,
        worker_models=dict(req.worker_models),
        worker_agents=agents,
        offline=req.offline,
        replay=str(req.replay.resolve()) if req.replay else None,
        isolation=req.isolation,
        caps=req.caps,
        writers=req.writers,
        tmux_socket=socket_name(req.name),
        orch_version=__version__,
    )
    return adapter, info


def adapter_of(info: RunInfo, n: int) -> AgentAdapter:
    """Worker n's adapter."""
    return get_adapter(info.agent_of(n))


def mode_of(info: RunInfo, adapter: AgentAdapter) -> str:
    """A worker's permission mode: the run's, or its own kind's default (a mixed fleet's run mode may be another's)."""
    facts = adapter.facts
    return info.permission_mode if info.permission_mode in facts.permission_modes else facts.default_permission_mode


def check(req: UpRequest, info: RunInfo, confinement: Confinement) -> None:
    """Everything `up` refuses, checked without making anything: the credentials, the agents' binaries, tmux,
    what the confinement needs (bubblewrap for a sandbox), and a run of that name (unless `req.replace`).
    `info`: planned from `req` (`plan`, which refused a bad request), as its backend's record."""
    rungateway.upstreams(info)  # a fleet across model APIs lacking one's credential: refused, nothing made
    for agent in info.agents():
        get_adapter(agent).binary()
    check_tmux()
    confinement.check(info)  # no bubblewrap or no user namespaces: refused in one line, before anything is made
    run = RunFolder.for_name(req.name)
    if not req.replace and ((run.root.exists() and not run.only_gateway()) or server_for(info).alive()):
        raise UsageError(f"run {req.name!r} already exists", hint=f"use --replace, or `orch kill {req.name}`")


def up(req: UpRequest, info: RunInfo, confinement: Confinement, boot_timeout: float = BOOT_TIMEOUT) -> RunInfo:
    """Create the run folder of `info` (planned from `req` by `plan`, as its backend's record) and a private tmux
    server with one agent per pane, confined by `confinement`; wait until booted.

    On any failure nothing is left behind: no tmux server, no run folder, no config dirs.
    """
    check(req, info, confinement)
    run = RunFolder.for_name(req.name)
    server = server_for(info)
    if (run.root.exists() and not run.only_gateway()) or server.alive():  # --replace: `check` refused it otherwise
        server.kill()
        rungateway.stop(req.name)
        confinement.stop(run)
        run.remove()
    try:
        run.create(info)
        launch(run, info, confinement, req.prompts, boot_timeout)
    except BaseException:
        server.kill()
        rungateway.stop(info.name)
        confinement.stop(run)
        run.remove()
        raise
    return info


def launch(
    run: RunFolder,
    info: RunInfo,
    confinement: Confinement,
    prompts: dict[int, str],
    boot_timeout: float,
    resume: bool = False,
) -> None:
    """Start the run's tmux server and workers in an existing run folder, and wait until they boot.

    With `resume` (the run's tmux server or container died), each worker resumes its last agent session
    when the agent kept it, else starts afresh; the run folder's history stays as it is.
    """
    if info.permission_mode == "bypassPermissions" and os.geteuid() == 0:
        log.warning("bypass mode as root: orch sets IS_SANDBOX=1 for the agent; prefer the container backend")
    if resume:
        wait_workers_gone(run, info.workers, confinement)
    adapters = {n: adapter_of(info, n) for n in range(1, info.workers + 1)}
    info.agent_versions = {agent: get_adapter(agent).version() for agent in info.agents()}
    info.agent_version = info.agent_versions[info.agent]
    server = server_for(info)
    handle = rungateway.ensure(run, info)
    confinement.prepare(run, info)
    confinement.ensure_relay(run, info, handle.url)
    env = agent_environment(info)
    seen = {n: len(run.hook_events(n)) for n in range(1, info.workers + 1)}
    with caps.counted_once():  # every pane's caps prefix from one count of the user's tasks
        for n, adapter in adapters.items():
            session = last_session(run, n) if resume else None
            own = rungateway.worker_env(handle, adapter, n)
            spec = _worker_spec(run, info, confinement, adapter, n, env, own, prompts.get(n), session)
            pane_id = server.start(f"orch-{info.name}", spec, n, env) if n == 1 else server.add_pane(spec, n)
            try:
                server.pipe_to(pane_id, run.log(n))
            except SandboxError:
                log.info("worker %s died before its transcript started; the boot check reports why", n)
            spawned = {"pane": pane_id, "agent": adapter.facts.name}
            run.log_event(ControllerEvent(event=Event.SPAWNED, worker=n, data=spawned))
    wait_booted(run, info, server, boot_timeout, seen)
    info.status = RunStatus.RUNNING
    run.write_info(info)


def worker_processes(run: RunFolder, workers: int, confinement: Confinement) -> list[int]:
    """Processes of the run's workers still alive on this machine: the agents, the hooks they run and
    their tool calls, and whatever they left running."""
    return sorted(_processes_of(run, range(1, workers + 1), confinement))


def _processes_of(run: RunFolder, workers: Iterable[int], confinement: Confinement) -> set[int]:
    """Every process of these workers, as their confinement tells them (orch.fleet.workerprocs)."""
    found = processes_by_worker(run, workers, confinement)
    return set().union(*found.values()) if found else set()


def stray_processes(
    run: RunFolder, n: int, pane: PaneInfo | None, confinement: Confinement, looker: WorkerProcesses | None = None
) -> dict[int, str]:
    """Worker n's processes outside its agent's process tree (pid: command line): what it left running,
    in the background or detached, to act later. One that exits meanwhile, or is a zombie, is not.
    `looker`: the caller's look at the workers' processes, kept between calls (a fresh one reads every
    process of the machine: the controller's costliest step at 64 workers, bench/README.md)."""
    root = pane.pid if pane is not None else None
    sandbox: set[int] = set()
    if root is not None:
        root, sandbox = confinement.agent_tree(root)
    strays = {}
    for pid in looker.look([n])[n] if looker is not None else _processes_of(run, [n], confinement):
        chain = procs.ancestry(pid)
        command = procs.command(pid)
        if chain is not None and command and pid not in sandbox and (root is None or root not in chain):
            strays[pid] = command
    return strays


def stop_strays(
    run: RunFolder, n: int, pane: PaneInfo | None, confinement: Confinement, looker: WorkerProcesses | None = None
) -> stopping.Stopped:
    """Stop worker n's stray processes (SIGTERM, then SIGKILL past a deadline): nothing one job left
    running may act during the next."""
    return stopping.stop(confinement, run.info(), n, lambda: set(stray_processes(run, n, pane, confinement, looker)))


def wait_workers_gone(run: RunFolder, workers: int, confinement: Confinement) -> None:
    """When a tmux server dies, its panes' shells die at once but the agents go on to run their exit
    hooks: a SessionEnd written after the next life's SessionStart reads as that life ending. So a
    relaunch waits for them first."""
    try:
        wait_until(
            lambda: not worker_processes(run, workers, confinement), EXIT_TIMEOUT, "the dead fleet's agents to exit"
        )
    except WaitTimeoutError:
        left = worker_processes(run, workers, confinement)
        log.warning("run %s: processes of its previous fleet still run: %s", run.name, left)


PACKAGE_DIR = str(Path(orch.__file__).resolve().parent)


def agent_pid(pane: PaneInfo) -> int | None:
    """The agent process under the pane's supervising shell (in a local strict sandbox, under bwrap and its init;
    beside the worker's portal to the gateway, a bare script of orch's: `python -S FILE`)."""
    if pane.pid is None:
        return None
    supervisor = supervisor_under(pane.pid) or pane.pid
    agents = [c for c in procs.children(supervisor) if not _orch_script(procs.cmdline(c))]
    return agents[0] if agents else None


def _orch_script(argv: list[str]) -> bool:
    return len(argv) > 2 and argv[1] == "-S" and argv[2].startswith(PACKAGE_DIR)


def agent_environment(info: RunInfo) -> dict[str, str]:
    """The environment of the run's tmux server, inherited by every pane: this process's, without any
    agent's credentials or base URL (those reach the gateway only; each worker's own base URL and token
    come with its pane, orch.fleet.rungateway.worker_env)."""
    env = rungateway.without_credentials(os.environ)
    env.pop("TMUX", None)
    # Workers call `orch bus post`: put this orch's bin dir first on their PATH.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    # A pane is an interactive terminal: TUIs that see a CI marker (the is-in-ci package: CI,
    # CONTINUOUS_INTEGRATION, CI_*) refuse to start interactively, as Gemini CLI does under CI=true.
    for var in [v for v in env if v in ("CI", "CONTINUOUS_INTEGRATION") or v.startswith("CI_")]:
        del env[var]
    return env


def _worker_spec(
    run: RunFolder,
    info: RunInfo,
    confinement: Confinement,
    adapter: AgentAdapter,
    n: int,
    env: dict[str, str],
    own: dict[str, str],
    prompt: str | None,
    resume: str | None,
    workdir: Path | None = None,
) -> LaunchSpec:
    """Seed worker n's config dir and return its launch spec, in its confinement and under the exit-status
    supervisor. `own`: the worker's own variables (its gateway URL and token), set in its pane only. `workdir`:
    where its agent starts (default: the run's workdir; a writer's worktree, a reviewer's checkout)."""
    context = WorkerContext(
        run=run,
        worker=n,
        workers=info.workers,
        workdir=workdir or Path(info.workdir),
        config_dir=run.config_dir(n),
        permission_mode=mode_of(info, adapter),
        env={**env, **own},
        model=info.worker_models.get(n, info.model),
        prompt=prompt,
        resume_session=resume,
        login_file=rungateway.login_file(info, adapter),
        pane_socket=confinement.pane_socket(run, adapter, n),
        boxed=confinement.boxed,
    )
    try:
        return confinement.pane(run, info, adapter, context, own)
    except OSError as exc:  # its config dir is the worker's to write: a file where a folder goes fails this start
        raise SandboxError(f"worker {n}'s config dir cannot be prepared: {exc}") from None


def restart(
    run: RunFolder,
    n: int,
    confinement: Confinement,
    prompt: str | None = None,
    boot_timeout: float | None = None,
    workdir: Path | None = None,
    fresh: bool = False,
    wait: bool = True,
) -> None:
    """Respawn worker n in its pane, resuming its agent session when the agent kept one (`fresh`: start a new
    one), in `workdir` (default: the run's workdir; the controller moves a writer into its worktree this way,
    so its model sees the worktree as its workdir).

    `prompt` is passed on the command line, so nothing has to be typed into the new pane. With `boot_timeout` (always
    for an agent with a screen at every start, which needs its answer), return once it booted again and takes input,
    as `up` does: a message sent earlier could be lost (opencode draws its TUI seconds after its first hook).
    `wait=False` returns at once even then: the caller answers that screen itself (the controller's watch does,
    orch.lead.recovery, so a restart never holds up its loop)."""
    seen = len(run.hook_events(n))
    info = run.info()
    run.check_worker(n)
    server = server_for(info)
    pane = server.pane(n)
    adapter = adapter_of(info, n)
    previous = last_session(run, n)
    session = None if fresh else previous
    handle = rungateway.ensure(run, info)
    if confinement.ensure_relay(run, info, handle.url):  # its sockets (and the other workers') served again
        run.log_event(ControllerEvent(event=Event.RELAY_STARTED, worker=n, data={"by": "restart"}))
    own = rungateway.worker_env(handle, adapter, n)
    spec = _worker_spec(run, info, confinement, adapter, n, agent_environment(info), own, prompt, session, workdir)
    server.respawn(pane.pane_id, spec)
    run.log_event(ControllerEvent(event=Event.RESTARTED, worker=n, data={"session": session}))
    if wait and boot_timeout is None and any(d.every_start for d in adapter.facts.dialogs):
        boot_timeout = BOOT_TIMEOUT
    if boot_timeout is not None:  # the other workers' earlier boots count: only n's new life is awaited
        wait_booted(run, info, server, boot_timeout, {n: seen}, {n: previous} if fresh and previous else None)


def last_session(run: RunFolder, n: int) -> str | None:
    """The agent session worker n last reported (its hooks carry the id)."""
    return next((e.session_id for e in reversed(run.hook_events(n)) if e.session_id), None)

"""A fleet started on this machine's tmux (the host, or the run's container): plan, boot, dialogs, restarts."""

from __future__ import annotations

import logging
import os
import sys
import uuid
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from orch import __version__, prereqs, procs, settings
from orch.agents.registry import check_permission_mode, get_adapter
from orch.backends.local import bwrap, egressproxy, relay
from orch.backends.local import portal as portal_module
from orch.contracts import AgentAdapter, LaunchSpec, UpRequest, WorkerContext
from orch.errors import SandboxError, UsageError, WaitTimeoutError
from orch.fleet import caps, rungateway, stopping
from orch.fleet.become import OPEN_BUNDLE, LaunchBundle
from orch.fleet.booting import wait_booted
from orch.fleet.tmux import PaneInfo, TmuxServer, check_tmux
from orch.fleet.workerprocs import processes_by_worker
from orch.fleet.workerstate import EXIT_EVENT
from orch.run.events import Event
from orch.run.files import atomic_write
from orch.run.folder import RunFolder, validate_name, validate_worker_count
from orch.run.paths import launch_dir
from orch.run.records import ControllerEvent, Isolation, LocalRunInfo, RunInfo, RunStatus
from orch.run.uids import drop_argv, worker_uid
from orch.waits import wait_until

log = logging.getLogger(__name__)

BOOT_TIMEOUT = 90.0
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
    if req.egress_allow is not None and (req.isolation is not Isolation.STRICT or settings.IN_CONTAINER.get()):
        raise UsageError(  # a shared worker reaches what this machine does: an allowlist would promise nothing
            "--egress allowlist applies to a strict local run (each worker in its sandbox, its network the relay's "
            "proxy)",
            hint="drop --egress/--allow, or run with --isolation strict",
        )
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
        egress_allow=req.egress_allow,
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


def check(req: UpRequest) -> LocalRunInfo:
    """Everything `up` refuses, checked without making anything: the request, the credentials, the agents'
    binaries, tmux, bubblewrap for a strict run, and a run of that name (unless `req.replace`)."""
    _, info = plan(req)
    rungateway.upstreams(info)  # a fleet across model APIs lacking one's credential: refused, nothing made
    for agent in info.agents():
        get_adapter(agent).binary()
    check_tmux()
    if bwrap.sandboxed(info):
        prereqs.bwrap_works()  # no bubblewrap or no user namespaces: refused in one line, before anything is made
    run = RunFolder.for_name(req.name)
    if not req.replace and ((run.root.exists() and not run.only_gateway()) or server_for(info).alive()):
        raise UsageError(f"run {req.name!r} already exists", hint=f"use --replace, or `orch kill {req.name}`")
    return info


def up(req: UpRequest, boot_timeout: float = BOOT_TIMEOUT) -> RunInfo:
    """Create the run folder and a private tmux server with one agent per pane; wait until booted.

    On any failure nothing is left behind: no tmux server, no run folder, no config dirs.
    """
    info = check(req)
    run = RunFolder.for_name(req.name)
    server = server_for(info)
    if (run.root.exists() and not run.only_gateway()) or server.alive():  # --replace: `check` refused it otherwise
        server.kill()
        rungateway.stop(req.name)
        relay.stop(run)
        run.remove()
    try:
        run.create(info)
        launch(run, info, req.prompts, boot_timeout)
    except BaseException:
        server.kill()
        rungateway.stop(info.name)
        relay.stop(run)
        run.remove()
        raise
    return info


def launch(
    run: RunFolder,
    info: RunInfo,
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
        wait_workers_gone(run, info.workers)
    adapters = {n: adapter_of(info, n) for n in range(1, info.workers + 1)}
    info.agent_versions = {agent: get_adapter(agent).version() for agent in info.agents()}
    info.agent_version = info.agent_versions[info.agent]
    server = server_for(info)
    handle = rungateway.ensure(run, info)
    if bwrap.sandboxed(info):  # the workers' bus and gateway sockets, before any worker starts
        for n in adapters:
            bwrap.prepare(run, n)
    ensure_relay(run, info, handle.url)
    env = agent_environment(info)
    seen = {n: len(run.hook_events(n)) for n in range(1, info.workers + 1)}
    for n, adapter in adapters.items():
        session = last_session(run, n) if resume else None
        own = rungateway.worker_env(handle, adapter, n)
        spec = _worker_spec(run, info, adapter, n, env, own, prompts.get(n), session)
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


def needs_relay(info: RunInfo) -> bool:
    """Whether the run's workers need the relay (orch.backends.local.relay): each local strict worker's bus, gateway
    and pane sockets; in a container's strict run with an `own_pane` agent, their pane sockets."""
    if bwrap.sandboxed(info):
        return True
    workers = range(1, info.workers + 1)
    return info.isolation is Isolation.STRICT and any(adapter_of(info, n).facts.own_pane for n in workers)


def ensure_relay(run: RunFolder, info: RunInfo, gateway_url: str) -> bool:
    """The run's relay running if its workers need one, started again if it died: it serves the same folders
    of sockets, which running workers see at once (orch.backends.local.relay). True when it had to be started."""
    if not needs_relay(info):
        return False
    was = relay.running(run)
    relay.ensure(run, info.workers, gateway_url if bwrap.sandboxed(info) else None)
    return not was


# The pane runs `sh -c SUPERVISOR orch-agent ARGV...`: sh runs the agent in the foreground (it keeps the
# terminal) and records how it ended, because tmux does not always reap a killed pane process.
SUPERVISOR = (
    '"$@"; s=$?; printf \'{"ts": %s, "hook_event_name": "%s", "status": %s}\\n\' '
    '"$(date +%s.%N)" "' + EXIT_EVENT + '" "$s" >> "$ORCH_STATE_FILE"; exit "$s"'
)


def supervised(spec: LaunchSpec, run: RunFolder, n: int) -> LaunchSpec:
    env = {**spec.env, settings.STATE_FILE.name: str(run.state(n))}
    return LaunchSpec(argv=["sh", "-c", SUPERVISOR, "orch-agent", *spec.argv], env=env, cwd=spec.cwd)


def worker_processes(run: RunFolder, workers: int) -> list[int]:
    """The run's workers' live processes here: agents, their hooks and tool calls, and what they left running."""
    return sorted(_processes_of(run, range(1, workers + 1)))


def _processes_of(run: RunFolder, workers: Iterable[int]) -> set[int]:
    """Every process of these workers: of their uids in a container under strict isolation, of their
    sandboxes locally, else those that inherit their supervisors' state-file variable (orch.fleet.workerprocs)."""
    found = processes_by_worker(run, run.info(), workers)
    return set().union(*found.values()) if found else set()


def stray_processes(run: RunFolder, n: int, pane: PaneInfo | None) -> dict[int, str]:
    """Worker n's processes outside its agent's process tree (pid: command line): what it left running,
    in the background or detached, to act later. One that exits meanwhile, or is a zombie, is not."""
    root = pane.pid if pane is not None else None
    sandbox: set[int] = set()
    if root is not None and bwrap.sandboxed(run.info()):
        # In its sandbox an orphan is adopted by the sandbox's init, itself under the pane: the agent's
        # tree is the supervisor's, below bwrap and its init (which are the sandbox, not strays).
        pane_pid, root = root, _supervisor_under(root)
        sandbox = set((procs.ancestry(root) or []) if root is not None else [pane_pid]) - {root}
    strays = {}
    for pid in _processes_of(run, [n]):
        chain = procs.ancestry(pid)
        command = procs.command(pid)
        if chain is not None and command and pid not in sandbox and (root is None or root not in chain):
            strays[pid] = command
    return strays


def _supervisor_under(pid: int) -> int | None:
    """The supervising shell (SUPERVISOR) among pid's first descendants, None if there is none (gone)."""
    level = [pid]
    for _ in range(4):
        for each in level:
            if procs.cmdline(each)[2:3] == [SUPERVISOR]:
                return each
        level = [child for each in level for child in procs.children(each)]
    return None


def stop_strays(run: RunFolder, n: int, pane: PaneInfo | None) -> stopping.Stopped:
    """Stop worker n's stray processes (SIGTERM, then SIGKILL past a deadline): nothing one job left
    running may act during the next."""
    return stopping.stop(run.info(), n, lambda: set(stray_processes(run, n, pane)))


def wait_workers_gone(run: RunFolder, workers: int) -> None:
    """When a tmux server dies, its panes' shells die at once but the agents go on to run their exit
    hooks: a SessionEnd written after the next life's SessionStart reads as that life ending. So a
    relaunch waits for them first."""
    try:
        wait_until(lambda: not worker_processes(run, workers), EXIT_TIMEOUT, "the dead fleet's agents to exit")
    except WaitTimeoutError:
        log.warning("run %s: processes of its previous fleet still run: %s", run.name, worker_processes(run, workers))


def agent_pid(pane: PaneInfo) -> int | None:
    """The agent process under the pane's supervising shell (in a local strict sandbox, under bwrap and
    its init; beside the worker's portal to the gateway)."""
    if pane.pid is None:
        return None
    supervisor = _supervisor_under(pane.pid) or pane.pid
    agents = [c for c in procs.children(supervisor) if portal_module.__file__ not in procs.cmdline(c)]
    return agents[0] if agents else None


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
    adapter: AgentAdapter,
    n: int,
    env: dict[str, str],
    own: dict[str, str],
    prompt: str | None,
    resume: str | None,
    workdir: Path | None = None,
) -> LaunchSpec:
    """Seed worker n's config dir and return its launch spec, wrapped by the exit-status supervisor.
    `own`: the worker's own variables (its gateway URL and token), set in its pane only. `workdir`: where its
    agent starts (default: the run's workdir; a writer's worktree, a reviewer's checkout)."""
    context = WorkerContext(
        run=run,
        worker=n,
        workers=info.workers,
        workdir=workdir or Path(info.workdir),
        config_dir=run.config_dir(n),
        permission_mode=mode_of(info, adapter),
        env={**env, **own, **({settings.SANDBOXED.name: "1"} if bwrap.sandboxed(info) else {})},
        model=info.worker_models.get(n, info.model),
        prompt=prompt,
        resume_session=resume,
        login_file=rungateway.login_file(info, adapter),
        pane_socket=_pane_socket(run, info, adapter, n),
    )
    try:
        if bwrap.sandboxed(info):
            return sandboxed_spec(run, info, adapter, context, own)
        if info.isolation is Isolation.STRICT:
            return strict_spec(run, adapter, context, own)
        spec = adapter.prepare(context)
    except OSError as exc:  # its config dir is the worker's to write: a file where a folder goes fails this start
        raise SandboxError(f"worker {n}'s config dir cannot be prepared: {exc}") from None
    limits = caps.limit_argv(info.caps, caps.own_uids(info), info.workers)
    return supervised(LaunchSpec(argv=[*limits, *spec.argv], env={**spec.env, **own}, cwd=spec.cwd), run, n)


def _pane_socket(run: RunFolder, info: RunInfo, adapter: AgentAdapter, n: int) -> Path | None:
    """Where worker n reaches its own pane (an `own_pane` agent under strict isolation): the relay's socket,
    bound into its sandbox, or in a container in a folder only its uid may enter (orch.backends.local.relay)."""
    if not adapter.facts.own_pane or info.isolation is not Isolation.STRICT:
        return None
    return bwrap.PANE_SOCKET if bwrap.sandboxed(info) else relay.own_pane_socket(run, n)


def sandboxed_spec(
    run: RunFolder, info: RunInfo, adapter: AgentAdapter, ctx: WorkerContext, own: dict[str, str]
) -> LaunchSpec:
    """Worker n's pane under local strict isolation: seeded here as under shared isolation, then run in a
    bubblewrap sandbox of its own (orch.backends.local.bwrap), its portal to the gateway first when it uses one."""
    if ctx.login_file is not None:
        raise UsageError(
            "strict isolation cannot hand workers the agent's own login file",
            hint=f"give the gateway a credential it can hold ({', '.join(adapter.facts.credentials.env)}), "
            "or run with --isolation shared",
        )
    spec = adapter.prepare(ctx)
    own = {**own, settings.SANDBOXED.name: "1"}
    limits = caps.limit_argv(info.caps, False, info.workers)  # its uid is the user's: the watchdog's caps too
    inner = supervised(LaunchSpec(argv=[*limits, *spec.argv], env={**spec.env, **own}, cwd=spec.cwd), run, ctx.worker)
    n = ctx.worker
    binaries = [get_adapter(agent).binary() for agent in info.agents()]
    home = None if "HOME" in inner.env else ctx.config_dir / "home"
    if home is not None:
        home.mkdir(mode=0o700, exist_ok=True)
    gateway = adapter.facts.gateway
    url = next((v for k, v in own.items() if gateway is not None and k == gateway.base_url_env), None)
    address = urlsplit(url) if url is not None else None
    env = inner.env
    ports = [f"{address.hostname}:{address.port}", bwrap.GATEWAY_SOCKET] if address is not None else []
    if egressproxy.allowlist_of(info) is not None:  # its way out: the relay's proxy, on a port of its loopback
        port = egressproxy.proxy_port(address.port if address is not None else None)
        ports += [f"127.0.0.1:{port}", bwrap.EGRESS_SOCKET]
        env = {**env, **egressproxy.proxy_env(port)}
    # As a bare script without site (standard library only): it starts before every agent.
    portal = [sys.executable, "-S", portal_module.__file__, *ports, "--"] if ports else []
    cwd, sockets = Path(spec.cwd or ctx.workdir), relay.worker_sockets(run, n)
    sandbox = bwrap.argv(run, n, Path(info.workdir), cwd, binaries, sockets, home, info.caps.disk)
    return LaunchSpec(argv=[*sandbox, *portal, *inner.argv], env=env, cwd=inner.cwd)


def strict_spec(run: RunFolder, adapter: AgentAdapter, ctx: WorkerContext, own: dict[str, str]) -> LaunchSpec:
    """Worker n's pane under strict isolation: it opens its launch bundle, drops to the worker's uid for good
    and seeds its own config dir there (orch.fleet.become); the supervisor runs as the worker too."""
    if ctx.login_file is not None:
        raise UsageError(
            "strict isolation cannot hand workers the agent's own login file",
            hint=f"give the gateway a credential it can hold ({', '.join(adapter.facts.credentials.env)})",
        )
    folder = launch_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    if folder.stat().st_uid != os.geteuid():
        raise SandboxError(f"{folder} is not this user's: refusing to leave a worker's token there")
    bundle = folder / f"{run.name}-agent-{ctx.worker}-{uuid.uuid4().hex}.json"
    atomic_write(bundle, LaunchBundle.of(adapter.facts.name, ctx, own).model_dump_json(), mode=0o600)
    uid = worker_uid(ctx.worker)
    inner = supervised(
        LaunchSpec(argv=[sys.executable, "-m", "orch.fleet.become", "3"], cwd=ctx.workdir), run, ctx.worker
    )
    limits = caps.limit_argv(run.info().caps, True, ctx.workers)  # as the worker: it can never raise them
    argv = ["sh", "-c", OPEN_BUNDLE, "orch-launch", str(bundle), *drop_argv(uid, uid), *limits, *inner.argv]
    return LaunchSpec(argv=argv, env=inner.env, cwd=ctx.workdir)


def restart(
    run: RunFolder,
    n: int,
    prompt: str | None = None,
    boot_timeout: float | None = None,
    workdir: Path | None = None,
    fresh: bool = False,
) -> None:
    """Respawn worker n in its pane, resuming its agent session when the agent kept one (`fresh`: start a new
    one), in `workdir` (default: the run's workdir; the controller moves a writer into its worktree this way,
    so its model sees the worktree as its workdir).

    `prompt` is passed on the command line, so nothing has to be typed into the new pane. With `boot_timeout` (always
    for an agent with a screen at every start, which needs its answer), return once it booted again and takes input,
    as `up` does: a message sent earlier could be lost (opencode draws its TUI seconds after its first hook)."""
    seen = len(run.hook_events(n))
    info = run.info()
    run.check_worker(n)
    server = server_for(info)
    pane = server.pane(n)
    adapter = adapter_of(info, n)
    previous = last_session(run, n)
    session = None if fresh else previous
    handle = rungateway.ensure(run, info)
    if ensure_relay(run, info, handle.url):  # its sockets (and the other workers') served again
        run.log_event(ControllerEvent(event=Event.RELAY_STARTED, worker=n, data={"by": "restart"}))
    own = rungateway.worker_env(handle, adapter, n)
    spec = _worker_spec(run, info, adapter, n, agent_environment(info), own, prompt, session, workdir)
    server.respawn(pane.pane_id, spec)
    run.log_event(ControllerEvent(event=Event.RESTARTED, worker=n, data={"session": session}))
    if boot_timeout is None and any(d.every_start for d in adapter.facts.dialogs):
        boot_timeout = BOOT_TIMEOUT
    if boot_timeout is not None:  # the other workers' earlier boots count: only n's new life is awaited
        wait_booted(run, info, server, boot_timeout, {n: seen}, {n: previous} if fresh and previous else None)


def last_session(run: RunFolder, n: int) -> str | None:
    """The agent session worker n last reported (its hooks carry the id)."""
    return next((e.session_id for e in reversed(run.hook_events(n)) if e.session_id), None)

"""Fleet operations on a run whose tmux server lives on this machine (the host, or inside the run's
container). The CLI calls these directly for local runs; the docker sandbox forwards to them."""

from __future__ import annotations

import getpass
import logging
import os
import re
import shutil
import sys
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from orch import __version__, bus
from orch.agents import get_adapter
from orch.agents.claude import CREDENTIAL_ENV
from orch.contracts import AgentAdapter, LaunchSpec, UpRequest, WorkerContext
from orch.errors import DeliveryError, SandboxError, UsageError, WaitTimeoutError
from orch.models import Backend, ControllerEvent, RunInfo, RunStatus, RunStatusView, WorkerState, WorkerStatus
from orch.offline import OFFLINE_API_KEY, start_model_server, stop_model_server
from orch.state import EXIT_EVENT, derive_state
from orch.tmux import PaneInfo, TmuxServer, check_tmux
from orch.waits import wait_for_paths, wait_until
from orch.workspace import RunFolder, atomic_write, validate_name, validate_worker_count

log = logging.getLogger(__name__)

BOOT_TIMEOUT = 90.0
# Enter is re-sent after 2, 4, 8 and 16 s without a UserPromptSubmit: a TUI that has just
# booted sometimes drops the first Enter, and a lost Enter should cost seconds, not a whole timeout.
ACK_TIMEOUT = 2.0
ENTER_ATTEMPTS = 4
DIALOG_GRACE = 2.0  # seconds before a booting worker's screen is checked for dialogs
KILL_TIMEOUT = 10.0  # seconds for killed agents to run their exit hooks
MAX_PARALLEL_SENDS = 8
ENDED = (WorkerState.EXITED, WorkerState.CRASHED)


def socket_name(name: str) -> str:
    return f"orch-{name}"


def server_for(info: RunInfo) -> TmuxServer:
    return TmuxServer(info.tmux_socket)


def pointer_text(run: RunFolder, n: int) -> str:
    """The one line that points a worker at its brief (the reference harness's wording)."""
    return f"Read and follow the instructions in {run.task(n)} then begin; work autonomously."


def protocol_footer(run: RunFolder, n: int, total: int) -> str:
    """The worker protocol appended to every brief: where to write, how to talk, how to finish."""
    return (
        "\n\n---\n## Worker protocol (added by orch)\n"
        f"- You are worker {n} of {total}. Work autonomously; never wait for confirmation.\n"
        f"- Post short progress and findings to the bus: `orch bus post {run.name} --as {n} 'text'` "
        f"(or read it: `cat {run.bus}`). One owner per shared file: ask on the bus for changes.\n"
        f"- When finished, write your result to {run.result(n)}, then, last, create {run.done(n)}.\n"
    )


# --- up ----------------------------------------------------------------------------------------
def plan(req: UpRequest, backend: Backend) -> tuple[AgentAdapter, RunInfo]:
    """Validate a request and describe the run it asks for; touches nothing."""
    validate_name(req.name)
    validate_worker_count(req.workers)
    adapter = get_adapter(req.agent)
    workdir = req.workdir.expanduser()
    if not workdir.is_dir():
        raise UsageError(f"workdir does not exist: {workdir}", hint="create it or pass another --workdir")
    mode = req.permission_mode or adapter.default_permission_mode
    if mode not in adapter.permission_modes:
        raise UsageError(
            f"unknown permission mode {mode!r} for agent {adapter.name}",
            hint=f"use one of: {', '.join(adapter.permission_modes)}",
        )
    for n in [*req.prompts, *req.worker_models]:
        if not 1 <= n <= req.workers:
            raise UsageError(f"prompt or model for worker {n} is out of range", hint=f"use 1 to {req.workers}")
    info = RunInfo(
        name=req.name,
        backend=backend,
        agent=adapter.name,
        workers=req.workers,
        workdir=str(workdir.resolve()),
        permission_mode=mode,
        model=req.model,
        worker_models=dict(req.worker_models),
        offline=req.offline,
        tmux_socket=socket_name(req.name),
        orch_version=__version__,
    )
    return adapter, info


def up(req: UpRequest, backend: Backend = Backend.LOCAL, boot_timeout: float = BOOT_TIMEOUT) -> RunInfo:
    """Create the run folder and a private tmux server with one agent per pane; wait until booted.

    On any failure nothing is left behind: no tmux server, no run folder, no config dirs.
    """
    adapter, info = plan(req, backend)
    adapter.binary()
    check_tmux()
    run = RunFolder.for_name(req.name)
    server = server_for(info)
    if run.root.exists() or server.alive():
        if not req.replace:
            raise UsageError(f"run {req.name!r} already exists", hint=f"use --replace, or `orch kill {req.name}`")
        server.kill()
        run.remove()
    try:
        run.create(info)
        launch(run, info, adapter, req.prompts, boot_timeout)
    except BaseException:
        server.kill()
        stop_model_server(run)
        run.remove()
        raise
    return info


def launch(
    run: RunFolder,
    info: RunInfo,
    adapter: AgentAdapter,
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
    info.agent_version = adapter.version()
    server = server_for(info)
    env = agent_environment(info, start_model_server(run) if info.offline else None)
    seen = {n: len(run.hook_events(n)) for n in range(1, info.workers + 1)}
    for n in range(1, info.workers + 1):
        session = last_session(run, n) if resume else None
        spec = _worker_spec(run, info, adapter, n, env, prompts.get(n), session)
        pane_id = server.start(f"orch-{info.name}", spec, n, env) if n == 1 else server.add_pane(spec, n)
        try:
            server.pipe_to(pane_id, run.log(n))
        except SandboxError:
            log.info("worker %s died before its transcript started; the boot check reports why", n)
        run.log_event(ControllerEvent(event="spawned", worker=n, data={"pane": pane_id}))
    wait_booted(run, info, adapter, server, boot_timeout, seen)
    info.status = RunStatus.RUNNING
    run.write_info(info)


# The pane runs `sh -c SUPERVISOR orch-agent ARGV...`: sh runs the agent in the foreground (it keeps the
# terminal) and records how it ended, because tmux does not always reap a killed pane process.
SUPERVISOR = (
    '"$@"; s=$?; printf \'{"ts": %s, "hook_event_name": "%s", "status": %s}\\n\' '
    '"$(date +%s.%N)" "' + EXIT_EVENT + '" "$s" >> "$ORCH_STATE_FILE"; exit "$s"'
)


def supervised(spec: LaunchSpec, run: RunFolder, n: int) -> LaunchSpec:
    env = {**spec.env, "ORCH_STATE_FILE": str(run.state(n))}
    return LaunchSpec(argv=["sh", "-c", SUPERVISOR, "orch-agent", *spec.argv], env=env, cwd=spec.cwd)


def agent_pid(pane: PaneInfo) -> int | None:
    """The agent process under the pane's supervising shell."""
    if pane.pid is None:
        return None
    try:
        children = Path(f"/proc/{pane.pid}/task/{pane.pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def agent_environment(info: RunInfo, model_url: str | None) -> dict[str, str]:
    """The environment of the run's tmux server, inherited by every pane.

    Credentials travel here (process environment), never on a command line or into a file. Offline
    runs drop every real credential and point the agents at the run's scripted model server.
    """
    env = dict(os.environ)
    env.pop("TMUX", None)
    # Workers call `orch bus post`: put this orch's bin dir first on their PATH.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    if info.offline:
        for var in (*CREDENTIAL_ENV, "ANTHROPIC_BASE_URL"):
            env.pop(var, None)
        env["ANTHROPIC_API_KEY"] = OFFLINE_API_KEY
        env["ANTHROPIC_BASE_URL"] = model_url or ""
    return env


def _worker_spec(
    run: RunFolder,
    info: RunInfo,
    adapter: AgentAdapter,
    n: int,
    env: dict[str, str],
    prompt: str | None,
    resume: str | None,
) -> LaunchSpec:
    """Seed worker n's config dir and return its launch spec, wrapped by the exit-status supervisor."""
    context = WorkerContext(
        run=run,
        worker=n,
        workers=info.workers,
        workdir=Path(info.workdir),
        config_dir=run.config_dir(n),
        permission_mode=info.permission_mode,
        env=env,
        model=info.worker_models.get(n, info.model),
        prompt=prompt,
        resume_session=resume,
    )
    return supervised(adapter.prepare(context), run, n)


def wait_booted(
    run: RunFolder,
    info: RunInfo,
    adapter: AgentAdapter,
    server: TmuxServer,
    timeout: float,
    seen: dict[int, int] | None = None,
) -> None:
    """Wait for every worker's SessionStart hook and its adapter's ready marker (ignoring the first
    `seen[n]` events of worker n, written by an earlier life of the run); answer known dialogs if one
    shows anyway."""
    pending = set(range(1, info.workers + 1))
    skip = seen or {}
    started = time.monotonic()

    def check() -> bool:
        panes = server.panes()
        for n in sorted(pending):
            events = run.hook_events(n)[skip.get(n, 0) :]
            marker = adapter.ready_marker(run, n)
            if any(e.hook_event_name == "SessionStart" for e in events) and (marker is None or marker.exists()):
                pending.discard(n)
                continue
            pane = panes.get(n)
            state, detail = derive_state(events[-1] if events else None, pane)
            if pane is None or state in ENDED:
                screen = server.capture(pane.pane_id, 20) if pane else ""
                last = next((ln for ln in reversed(screen.splitlines()) if ln.strip()), "no output")
                raise SandboxError(f"worker {n} exited while booting ({detail}): {last.strip()[:200]}")
            # Seeding prevents dialogs; screens are only scraped for a worker that is late to boot.
            if time.monotonic() - started > DIALOG_GRACE:
                answer_dialogs(run, adapter, server, n, pane)
        return not pending

    try:
        wait_until(check, timeout, "workers to boot", interval=0.2, watch=run.state_dir)
    except WaitTimeoutError:
        raise WaitTimeoutError(
            f"workers {_join(pending)} did not boot within {timeout:g}s",
            hint=f"look at their screens in {run.logs_dir}",
        ) from None


def answer_dialogs(run: RunFolder, adapter: AgentAdapter, server: TmuxServer, n: int, pane: PaneInfo) -> bool:
    """Fallback watchdog: recognise a blocking dialog on screen and answer it. True if one was."""
    dialogs = adapter.dialogs()
    if not dialogs:
        return False
    screen = server.capture(pane.pane_id)
    for dialog in dialogs:
        if re.search(dialog.pattern, screen):
            server.send_keys(pane.pane_id, *dialog.keys)
            run.log_event(ControllerEvent(event="dialog-answered", worker=n, data={"dialog": dialog.name}))
            return True
    return False


def restart(run: RunFolder, n: int, prompt: str | None = None) -> None:
    """Respawn worker n in its pane, resuming its agent session when the agent kept one.

    `prompt` is passed on the command line, so nothing has to be typed into the new pane.
    """
    info = run.info()
    run.check_worker(n)
    server = server_for(info)
    pane = server.pane(n)
    adapter = get_adapter(info.agent)
    session = last_session(run, n)
    model_url = run.model_server_url.read_text().strip() if info.offline else None
    env = agent_environment(info, model_url)
    spec = _worker_spec(run, info, adapter, n, env, prompt, session)
    server.respawn(pane.pane_id, spec)
    run.log_event(ControllerEvent(event="restarted", worker=n, data={"session": session}))


def last_session(run: RunFolder, n: int) -> str | None:
    """The agent session worker n last reported (its hooks carry the id)."""
    return next((e.session_id for e in reversed(run.hook_events(n)) if e.session_id), None)


# --- talking to workers ------------------------------------------------------------------------
def live_pane(run: RunFolder, n: int) -> tuple[TmuxServer, PaneInfo]:
    info = run.info()
    run.check_worker(n)
    server = server_for(info)
    if not server.alive():
        raise DeliveryError(f"run {run.name!r} is not running", hint=f"start it again with `orch up {run.name}`")
    pane = server.pane(n)
    state, detail = derive_state(run.last_hook_event(n), pane)
    if state in ENDED:
        raise DeliveryError(f"worker {n} is not running ({state.value}: {detail})")
    return server, pane


def send(run: RunFolder, n: int, text: str, ack_timeout: float = ACK_TIMEOUT) -> None:
    """Deliver `text` (any length, multi-line) as one submission and confirm it via the hook."""
    if not text.strip():
        raise UsageError("empty message", hint="give the text to send")
    if "\x00" in text:
        raise UsageError("message contains NUL bytes", hint="send UTF-8 text")
    server, pane = live_pane(run, n)
    seen = len(run.hook_events(n))

    def acknowledged() -> bool:
        return any(e.hook_event_name == "UserPromptSubmit" for e in run.hook_events(n)[seen:])

    before = server.capture(pane.pane_id)
    server.paste(pane.pane_id, text.rstrip("\n"))
    # Enter must come as a separate key after the paste has landed, or it joins the paste.
    try:
        wait_until(lambda: server.capture(pane.pane_id) != before, 2.0, "the paste to show", interval=0.05)
    except WaitTimeoutError:
        log.info("paste to worker %s did not change the screen; sending Enter anyway", n)
    for attempt in range(1, ENTER_ATTEMPTS + 1):
        server.send_keys(pane.pane_id, "Enter")
        try:
            wait_until(acknowledged, ack_timeout * 2 ** (attempt - 1), "the acknowledgement", watch=run.state_dir)
        except WaitTimeoutError:
            log.info("worker %s did not acknowledge Enter (attempt %s)", n, attempt)
            continue
        run.log_event(ControllerEvent(event="sent", worker=n, data={"chars": len(text), "enters": attempt}))
        return
    server.send_keys(pane.pane_id, "C-u")  # clear the stuck draft so the next send starts clean
    run.log_event(ControllerEvent(event="send-failed", worker=n, data={"chars": len(text)}))
    raise DeliveryError(
        f"worker {n} did not acknowledge the message after {ENTER_ATTEMPTS} tries",
        hint=f"see `orch read {run.name} {n}`: it may be stuck on a dialog",
    )


def brief(run: RunFolder, n: int, text: str) -> Path:
    """Write `agent-N.task.md` (with the worker protocol) and send the one-line pointer to it."""
    if not text.strip():
        raise UsageError("empty brief", hint="write the task into the brief file")
    info = run.info()
    run.check_worker(n)
    live_pane(run, n)
    atomic_write(run.task(n), text.rstrip("\n") + protocol_footer(run, n, info.workers))
    run.log_event(ControllerEvent(event="briefed", worker=n, data={"task": str(run.task(n))}))
    send(run, n, pointer_text(run, n))
    return run.task(n)


def brief_many(run: RunFolder, briefs: Mapping[int, str]) -> dict[int, DeliveryError | None]:
    """Brief several workers at once (worker -> text); each one's delivery error, or None.

    Each send waits for its worker's acknowledgement, so one after another the last of N workers would
    start N sends late; panes are independent, so the sends run side by side.
    """
    if not briefs:
        return {}

    def deliver(n: int) -> DeliveryError | None:
        try:
            brief(run, n, briefs[n])
        except DeliveryError as exc:
            return exc
        return None

    with ThreadPoolExecutor(max_workers=min(len(briefs), MAX_PARALLEL_SENDS)) as pool:
        return dict(zip(briefs, pool.map(deliver, briefs), strict=True))


def read(run: RunFolder, n: int, lines: int | None = None) -> str:
    info = run.info()
    run.check_worker(n)
    server = server_for(info)
    if server.alive():
        return server.capture(server.pane(n).pane_id, lines)
    # The server is gone: the transcript is the evidence.
    try:
        text = run.log(n).read_text(errors="replace")
    except FileNotFoundError:
        raise UsageError(f"run {run.name!r} is not running and worker {n} left no transcript") from None
    out = text.splitlines()
    return "\n".join(out[-lines:] if lines else out)


# --- watching ----------------------------------------------------------------------------------
def status(run: RunFolder) -> RunStatusView:
    info = run.info()
    server = server_for(info)
    if not server.alive():
        return status_view(run, info, panes=None, why_down="tmux server not running")
    return status_view(run, info, panes=server.panes())


def status_view(
    run: RunFolder, info: RunInfo, panes: dict[int, PaneInfo] | None, why_down: str | None = None
) -> RunStatusView:
    """The status table; `panes=None` means the run's tmux server (or container) is gone."""
    rows = []
    for n in range(1, info.workers + 1):
        if panes is None:
            state, detail = WorkerState.EXITED, why_down
        else:
            state, detail = derive_state(run.last_hook_event(n), panes.get(n))
        cost = run.status_line_info(n)
        rows.append(
            WorkerStatus(
                worker=n,
                state=state,
                detail=detail,
                done=run.done(n).exists(),
                result=run.result(n).exists(),
                last_bus=bus.last_line_of(run, n),
                cost_usd=cost.cost_usd if cost else None,
                pane_id=panes[n].pane_id if panes and n in panes else None,
            )
        )
    return RunStatusView(
        name=info.name,
        backend=info.backend,
        agent=info.agent,
        status=info.status,
        alive=panes is not None,
        workers=rows,
    )


def wait(run: RunFolder, workers: Iterable[int] | None, timeout: float | None) -> None:
    """Return as soon as the done flags exist (inotify); WaitTimeoutError naming who is missing."""
    info = run.info()
    chosen = sorted(set(workers)) if workers else list(range(1, info.workers + 1))
    for n in chosen:
        run.check_worker(n)
    missing = wait_for_paths([run.done(n) for n in chosen], timeout)
    if missing:
        late = [n for n in chosen if run.done(n) in missing]
        raise WaitTimeoutError(f"timed out after {timeout:g}s; no done flag from workers {_join(late)}")


# --- teardown ----------------------------------------------------------------------------------
def kill(run: RunFolder) -> None:
    """Stop the tmux server; keep the run folder (transcripts are evidence); drop config dirs."""
    info = run.info()
    server = server_for(info)
    pids = [p.pid for p in (server.panes_if_running() or {}).values() if p.pid]
    server.kill()
    # Agents run their exit hooks after SIGHUP: wait for them, so none writes into a run that
    # `up --replace` recreates at the same path.
    try:
        wait_until(lambda: not any(_running(pid) for pid in pids), KILL_TIMEOUT, "the agents to exit")
    except WaitTimeoutError:
        log.warning("run %s: some agent processes are still exiting", run.name)
    stop_model_server(run)
    shutil.rmtree(run.config_root, ignore_errors=True)
    info.status = RunStatus.STOPPED
    run.write_info(info)
    run.log_event(ControllerEvent(event="killed", data={"by": _whoami(), "at": time.time()}))


def _running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _whoami() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def _join(numbers: Iterable[int]) -> str:
    return ", ".join(str(n) for n in sorted(numbers))

"""`orch run`: start a fleet for a spec on a backend, then drive it with the controller where its tmux lives.

Local runs (and runs inside their container) are driven in this process. For a containerised run the
host creates the run through the sandbox, writes the spec and the controller's initial state into the
run folder (a mount the container sees; on a remote engine, copied into the run's volume), then forwards
`orch run --resume NAME` into the container: the controller runs next to the workers, and the host gets
its exit code (and, from a remote engine, the run folder copied back).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from orch.backends import registry as backends
from orch.backends.base import Backend, Placement, UpOptions
from orch.contracts import OrchCommand, Sandbox, UpRequest
from orch.errors import OrchError, UsageError
from orch.exitcodes import Exit
from orch.fleet import launch
from orch.jobs.state import load_state, save_state
from orch.lead import decisions
from orch.lead.changes.start import Prepared
from orch.lead.controller import Controller, initial_state, read_spec, write_spec
from orch.recording.plan import Cassette
from orch.report.model import RunReport, load_report
from orch.run.events import Event
from orch.run.folder import RunFolder, validate_name
from orch.run.records import ControllerEvent, RunStatus
from orch.spec.model import FleetSpec


@dataclass(frozen=True)
class RunResult:
    run: RunFolder
    exit_code: int
    report: RunReport | None
    stopped: str | None = None
    """Why the controller stopped before the end (its container died, or it exited): `--resume` continues."""


def up_request(
    spec: FleetSpec, name: str, strict_ok: bool, replace: bool = False, replay: Path | None = None
) -> UpRequest:
    """`strict_ok`: whether strict isolation can be had (the backend's `strict_possible`)."""
    agent_models = spec.agent_models()
    models = {model for _, model in agent_models.values()}
    # One model for all: the run's model. Several: each worker names its own (None: the agent's default).
    model = next(iter(models)) if len(models) == 1 else None
    per_worker = {n: m for n, (_, m) in agent_models.items() if m is not None} if len(models) > 1 else {}
    agent = spec.groups()[0].agent
    return UpRequest(
        name=name,
        workers=spec.worker_count(),
        agent=agent,
        worker_agents={n: a for n, (a, _) in agent_models.items() if a != agent},
        workdir=spec.workdir,
        permission_mode=spec.permission_mode,
        model=model,
        replace=replace,
        offline=spec.offline,
        worker_models=per_worker,
        replay=replay,
        isolation=decisions.isolation(spec, strict_ok),
        caps=spec.limits.caps(),
        writers=bool(spec.writer_tasks()),
        checks=bool(spec.writer_tasks() and spec.checks),
    )


def placed(spec: FleetSpec, flags: Placement | None = None) -> Placement:
    """Where on a swarm's nodes a spec's run goes: the spec's `placement:` with the command line's, whose
    `--constraint`s add to the spec's (Swarm wants every one: a flag only narrows) and whose `--per-node` wins."""
    flags = flags or Placement()
    constraints = tuple(dict.fromkeys([*spec.placement.constraints, *flags.constraints]))
    return Placement(constraints, flags.per_node if flags.per_node is not None else spec.placement.per_node)


def sandbox(spec: FleetSpec, backend: Backend, copy: bool = False, placement: Placement | None = None) -> Sandbox:
    """The sandbox a spec's run gets on `backend`, with its settings; `copy`: a disposable copy of the workdir,
    where the backend gives one (a container run); `placement`: the command line's, over the spec's (`placed`).
    Its controller runs where its fleet does (`lead`)."""
    where = placed(spec, placement)
    settings = backend.settings(UpOptions(boot_timeout=spec.timeouts.boot, copy=copy, placement=where, lead=True))
    return backends.start_sandbox(backend, settings=settings)


def start(
    spec: FleetSpec,
    name: str,
    backend: Backend,
    replace: bool = False,
    copy: bool = False,
    cassette: Cassette | None = None,
    prepared: Prepared | None = None,
    placement: Placement | None = None,
) -> RunFolder:
    """Create the run (workers booted), its saved spec and the controller's initial state.

    `copy` (a backend that gives one: a container run's): the workers get a disposable copy of the workdir.
    `cassette` (orch.recording.plan, checked by the caller): the run's gateway answers from that recording.
    `prepared` (a spec with writers; orch.lead.changes.start.prepare): the run's repository and base checks,
    moved into the run folder once it exists. `placement`: the command line's, over the spec's (`placed`).
    """
    validate_name(name)
    if cassette is not None and RunFolder.for_name(name).root.resolve() == cassette.root.resolve():
        raise UsageError(f"run {name!r} is the recording being replayed", hint="give the replay another --name")
    box = sandbox(spec, backend, copy, placement)
    info = box.up(up_request(spec, name, backend.strict_possible(), replace, cassette.root if cassette else None))
    run = RunFolder.for_name(name)
    write_spec(run, spec)
    save_state(run, initial_state(run, spec, cassette))
    created = {"tasks": spec.task_ids(), "offline": spec.offline, "replay": str(cassette.root) if cassette else None}
    run.log_event(ControllerEvent(event=Event.RUN_CREATED, data=created))
    pushed = [run.fleet_spec, run.controller_state]  # (a swarm run's first life takes the events too: the line above)
    if prepared is not None:
        prepared.install(run)
        pushed += [p for p in (run.repo_dir, run.repo_info, run.base_checks) if p.exists()]
    box.push(info, pushed)  # a remote engine's controller reads them there
    return run


def create(spec: FleetSpec, name: str, prepared: Prepared | None = None) -> RunFolder:
    """compose's `lead` (`orch run SPEC --prepare`, run by the container's init as the run's uid): the run's
    folder as `start` makes it, with no worker started. The init then gives each worker its files (under
    strict isolation, which it can: it is still root) and `orch serve-run NAME --drive` launches the fleet
    and runs the controller. The init removed any earlier run of the name; one found is refused."""
    validate_name(name)
    _, info = launch.plan(up_request(spec, name, strict_ok=True))
    run = RunFolder.for_name(name)
    if run.exists():
        raise UsageError(f"run {name!r} already exists", hint="the container's init clears it first")
    run.create(info)
    try:
        write_spec(run, spec)
        save_state(run, initial_state(run, spec, None))
        if prepared is not None:
            prepared.install(run)
        created = {"tasks": spec.task_ids(), "offline": spec.offline, "replay": None}
        run.log_event(ControllerEvent(event=Event.RUN_CREATED, data=created))
    except BaseException:
        run.remove()
        raise
    return run


def drive(run: RunFolder, commentary: bool = True) -> RunResult:
    """Run the controller to the end (here, or inside the run's container) and read the report.

    A run whose workers are gone (tmux server or container died with the controller) is relaunched
    first on the same folder, sessions resumed; the controller then re-points them at their briefs.
    `commentary`: for a run folder on a remote engine, have the controller's commentary streamed back
    (elsewhere the caller reads events.jsonl itself).
    """
    info = run.info()
    box = backends.sandbox_for(info)
    # A fleet that never started (a swarm lead run: the forward below starts its first life) is not relaunched.
    if load_state(run).outcome is None and info.status is not RunStatus.STARTING and not box.alive(info):
        run.log_event(ControllerEvent(event=Event.FLEET_RELAUNCHING))
        backends.sandbox_for(info, read_spec(run).timeouts.boot).resume(run.name)
        info = run.info()

    def here() -> int:
        return Controller(run, read_spec(run), load_state(run)).run_to_end().exit_code

    # In a container, the controller prints its commentary (forwarded stderr) only when this machine cannot
    # read the run's events.jsonl itself; the host prints the result.
    args = ["run", "--resume", run.name, "--no-result"]
    if not commentary or backends.folder_is_here(info):
        args.append("--no-commentary")
    code = box.forward(info, OrchCommand(args, here))
    box.pull(info)  # a remote engine's run folder: its state and report, copied back here
    if load_state(run).outcome is None:  # keep all for --resume
        # The container's state may lag behind a kill that ended the exec: then the exit code is all we say.
        alive = box.alive(info)
        why = f"the controller stopped with exit {code}" if alive else "the controller's container died"
        return RunResult(run, Exit.FAILED, None, stopped=why)
    # The controller's teardown stopped the workers; what outlives it (the run's container, a swarm run's
    # collector, secrets and network) goes here.
    if read_spec(run).teardown:
        with contextlib.suppress(OrchError):  # already gone: the run folder has the report
            if box.alive(info) or backends.backend_of(info).lingers:
                box.kill(info)
    return RunResult(run, code, _report(run))


def _report(run: RunFolder) -> RunReport | None:
    try:
        return load_report(run)
    except (OSError, ValueError):
        return None


def run_name(spec: FleetSpec, path: Path, name: str | None, replay: bool = False) -> str:
    """`--name`, else the spec's name or file name (with `-replay` for a replay: the recording has that
    name, most likely)."""
    return validate_name(name or (spec.name or path.stem) + ("-replay" if replay else ""))

"""What `orch run FLEET.yaml` checks before anything exists, in one place, so that `orch spec check` makes
exactly the same checks: the spec, a replay's recording, the run's name, isolation, the credentials, what
the run's sandbox would refuse (the agents, tmux, bubblewrap, the image, a run of that name), and for a spec
with writers its repository and the checks on the base. Each refusal is one line (a UsageError)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orch.backends.base import Backend, Placement
from orch.container import egress
from orch.entry import runner
from orch.errors import UsageError
from orch.fleet import rungateway
from orch.lead import decisions
from orch.lead.changes import start as changes_start
from orch.lead.changes.start import Prepared
from orch.recording import transfer
from orch.recording.plan import Cassette
from orch.run.records import EgressMode, Isolation
from orch.settings.compose import EGRESS
from orch.spec.load import Issue, load_spec
from orch.spec.model import FailOn, FleetSpec, Role

STARTING_NOTES = {
    Isolation.STRICT: "each worker in a sandbox of its own, writing only its own outbox (a writer its own worktree)",
    Isolation.SHARED: "the workers share one uid (for debugging; the report says so)",
}
"""What a run's isolation means, said before it starts (the report says what it guaranteed at the end)."""


@dataclass
class Preflight:
    """A spec that `orch run` would start: what the checks found, and the repository made for its writers."""

    spec: FleetSpec
    name: str
    backend: Backend
    cassette: Cassette | None
    isolation: Isolation
    prepared: Prepared | None
    """The run's repository and base checks (a spec with writers): `install`ed by the run, else `discard`ed."""
    credential_warning: str | None = None
    """What the run's gateway will say of its credential when it starts (none found, or a login file passed
    through): `orch spec check` says it now."""

    @property
    def warnings(self) -> list[str]:
        """What the run would start with all the same (globs that match no file, a check failing on the base)."""
        return self.prepared.warnings if self.prepared else []

    def discard(self) -> None:
        if self.prepared is not None:
            self.prepared.discard()

    def summary(self) -> str:
        """One line: the workers, the tasks by role (writers named), verification, checks, budget, where."""
        spec = self.spec
        kinds = ", ".join(f"{g.workers} {g.agent}" + (f" ({g.model})" if g.model else "") for g in spec.groups())
        by_role: dict[Role, list[str]] = {}
        for task_id, task in zip(spec.task_ids(), spec.tasks, strict=True):
            by_role.setdefault(task.role, []).append(task_id)
        tasks = ", ".join(f"{len(ids)} {role.value} ({', '.join(ids)})" for role, ids in by_role.items())
        policy = spec.verification
        verify = f"{policy.rounds.value}, {policy.verifiers_per_finding} verifier(s) per finding"
        if policy.needed() != policy.verifiers_per_finding:
            verify += f" (quorum {policy.needed()})"
        where = "offline, " if spec.offline else ""
        where += f"replaying {self.cassette.root}, " if self.cassette else ""
        parts = [f"{kinds} worker(s)", f"tasks: {tasks}", verify, self._checks(), budget_text(spec)]
        return "; ".join([*parts, f"{where}{self.backend.name}, {self.isolation.value} isolation"])

    def _checks(self) -> str:
        checks = self.spec.checks
        if not checks:
            return "no checks" if self.spec.writer_tasks() else "no writers"
        record = self.prepared.baseline if self.prepared else None
        if record is None:
            return f"{len(checks)} check(s) (run on the base in the run's container when it starts)"
        failing = [r.command for r in record.results if not r.passed]
        said = "passed" if not failing else f"{len(failing)} failed"
        return f"{len(checks)} check(s) (ran on the base: {said})"


def budget_text(spec: FleetSpec) -> str:
    budget = spec.budget
    caps = [
        f"${budget.max_cost_usd:.2f}" if budget.max_cost_usd else "",
        f"${budget.max_cost_per_worker_usd:.2f} per worker" if budget.max_cost_per_worker_usd else "",
        f"{budget.max_tokens:,} tokens" if budget.max_tokens else "",
        f"{budget.max_tokens_per_worker:,} tokens per worker" if budget.max_tokens_per_worker else "",
    ]
    shown = ", ".join(c for c in caps if c)
    if not shown:
        return "no budget (nothing caps the cost)" if not spec.offline else "no budget"
    return f"budget {shown}"


def placement_issues(spec: FleetSpec, backend: Backend) -> list[Issue]:
    """A spec's `placement:` on a backend with no nodes to choose from: a problem of the spec, at its line."""
    if spec.placement.given() and not backend.places:
        key = "constraints" if spec.placement.constraints else "per_node"
        why = f"places a run on a swarm's nodes; {backend.title} has none to choose (use --backend swarm)"
        return [Issue(("placement", key), why)]
    return []


def _compose_egress() -> EgressMode | None:
    """The egress compose's init applies to the container this `--prepare` runs in (ORCH_EGRESS; None: one the
    init refuses itself)."""
    try:
        return EgressMode(EGRESS.get())
    except ValueError:
        return None


def preflight(
    spec_path: Path,
    name: str | None,
    backend: Backend,
    replace: bool = False,
    copy: bool = False,
    replay: str | None = None,
    base: str | None = None,
    snapshot: bool = False,
    prepare: bool = False,
    also: Callable[[FleetSpec], object] | None = None,
    fail_on: FailOn | None = None,
    placement: Placement | None = None,
    workdir: Path | None = None,
) -> Preflight:
    """Every check `orch run` makes before it creates anything. `prepare` (compose's lead, run by the
    container's init): the run is made there without starting a sandbox, so the sandbox's own checks wait.
    `also`: a check of the spec from above this layer (the CLI's notifications), made right after loading it.
    `fail_on` (`orch run --fail-on`) wins over the spec's; `workdir` (`--repo`) over its `workdir:`."""
    spec = load_spec(spec_path, lambda loaded: placement_issues(loaded, backend), workdir)
    if fail_on is not None:
        spec = spec.model_copy(update={"fail_on": fail_on})
    if also is not None:
        also(spec)
    if (base is not None or snapshot) and not spec.writer_tasks():
        raise UsageError("--base and --snapshot are for specs with writer tasks", hint="drop them")
    # A recording (a run, or an exported file) is checked before anything is made.
    cassette = transfer.cassette(replay, spec, backend.pinned_agents) if replay is not None else None
    run_name = runner.run_name(spec, spec_path, name, replay=cassette is not None)
    # A strict spec that cannot be had stops here (the init gives a prepared run its uids).
    isolation = decisions.isolation(spec, prepare or backend.strict_possible())
    # A live fleet across model APIs without a credential of one of them.
    upstreams = rungateway.fleet_credentials([g.agent for g in spec.groups()], spec.offline or cassette is not None)
    if not prepare:
        box = runner.sandbox(spec, backend, copy, placement)
        replayed = cassette.root if cassette else None
        box.check(runner.up_request(spec, run_name, backend.strict_possible(), replace, replayed))
    elif (mode := _compose_egress()) is not None:  # compose's lead, in the container its init has not confined yet
        egress.refuse_open_checks(mode, isolation, bool(spec.writer_tasks() and spec.checks))
    # A run with writers: its repository and base checks, made (or refused in one line) before the run exists.
    prepared = (
        changes_start.prepare(spec, run_name, base, snapshot, checks_here=backend.checks_at_start and not prepare)
        if spec.writer_tasks()
        else None
    )
    return Preflight(spec, run_name, backend, cassette, isolation, prepared, upstreams.warning)

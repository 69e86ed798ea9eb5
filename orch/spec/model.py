"""The fleet spec: what `orch run FLEET.yaml` is asked to do, as pydantic models (unknown keys are errors).

A spec names the workdir, the agents and how many workers, the tasks, the roles' brief templates
(defaults ship in `orch/data/roles/`), the verification policy, timeouts, stall/restart/retry limits
and budget caps. Templates and offline scripts use `{{name}}` placeholders. Loading and checking a
spec file, with each problem's location, is orch.spec.load.
"""

from __future__ import annotations

from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from orch.notify.config import NotifyConfig, spec_problems
from orch.offline.script import TOOLS as SCRIPT_TOOLS
from orch.run.folder import MAX_WORKERS, NAME_RE
from orch.run.records import Count, Isolation, Size, Strict, WorkerCaps, byte_size
from orch.settings.limits import RUN_FOLDER_MAX, WORKER_DISK, WORKER_MEMORY, WORKER_PIDS
from orch.spec.placement import PlacementSpec
from orch.versions import DEFAULT_AGENT

ID_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"
STEP_KINDS = (*SCRIPT_TOOLS, "tool", "reply", "fail")
# The one key besides its kind a step may have: write's content, tool's input (a mapping), fail's
# retry_after (seconds, the header the scripted model's error carries).
STEP_EXTRAS = {"write": "content", "tool": "input", "fail": "retry_after"}


class Role(StrEnum):
    FINDER = "finder"
    VERIFIER = "verifier"
    REVIEWER = "reviewer"
    """Tries to refute a writer's change (a job made from the change, like a verifier's from a finding)."""
    WRITER = "writer"
    """Changes the code in its own worktree; the change lands only through the gate and the queue."""
    FIXER = "fixer"
    """A writer handed the run's confirmed findings."""
    SCRIBE = "scribe"
    """A writer that writes docs (same worktree, gate and queue as a writer; its own brief)."""


TASK_ROLES = (Role.FINDER, Role.WRITER, Role.FIXER, Role.SCRIBE)
WRITER_ROLES = (Role.WRITER, Role.FIXER, Role.SCRIBE)
"""Roles whose jobs change the tree: each gets a worktree, and its change goes through the gate."""

# The paths a change may not edit unless its task `allow:`s them, and that the checks always take from the base
# (orch.lead.changes.grading; spec `protect:` replaces this list, `protect: [+GLOB, ...]`, every entry starting
# with +, extends it): the tests, what test runners discover or import by convention (unittest's `test*.py`,
# pytest's `conftest.py`, Python's `sitecustomize.py`) and the runners' configuration, so a change cannot
# pass the checks by weakening them. Globs are matched against the path from the tree's root
# (orch.lead.changes.grading.matches: `**` spans folders, `*` does not, a glob without / matches the file name
# at any depth).
DEFAULT_PROTECT = (
    "tests/**",
    "test/**",
    "**/tests/**",
    "**/test/**",
    "test*.py",
    "*_test.py",
    "*_test.go",
    "*.test.js",
    "*.test.ts",
    "*.spec.js",
    "*.spec.ts",
    "conftest.py",
    "sitecustomize.py",
    "usercustomize.py",
    "pytest.ini",
    ".pytest.ini",
    "pytest.toml",
    ".pytest.toml",
    "pyproject.toml",
    "setup.cfg",
    "setup.py",
    "tox.ini",
    "noxfile.py",
    ".coveragerc",
    "package.json",
    "jest.config.*",
    "vitest.config.*",
    "Makefile",
    "go.mod",
    "Cargo.toml",
    ".github/**",
    ".gitlab-ci.yml",
    ".pre-commit-config.yaml",
    ".gitattributes",
)


class ChangeNeed(StrEnum):
    """Whether a writer task must end with a change (a task's `change:`)."""

    REQUIRED = "required"
    """A writer that leaves the tree as it was fails its task (its change FAILED, the run exits 4)."""
    OPTIONAL = "optional"
    """Leaving the tree as it was completes the task (UNCHANGED), a fixer handed confirmed findings included."""


class FailOn(StrEnum):
    """Which CONFIRMED findings fail the run (exit 6, status findings; orch/exitcodes.py): those of this
    severity or above, or none. A REFUTED finding never does: catching it is what verification is for."""

    NEVER = "never"
    """Confirmed findings are the run's result; they show in the report, SARIF and JUnit, and it exits 0."""
    INFO = "info"
    """Any confirmed finding."""
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"

    def covers(self, severity: str) -> bool:
        """Whether a confirmed finding of this severity fails the run (an unknown severity counts as medium,
        as in report.sarif)."""
        if self is FailOn.NEVER:
            return False
        order = [f.value for f in FailOn][1:]  # info .. critical: the findings' Severity, lowest first
        return order.index(severity if severity in order else "medium") >= order.index(self.value)


class Dispatch(StrEnum):
    QUEUE = "queue"
    """Free workers take the next pending task (tasks may outnumber workers)."""
    PER_WORKER = "per-worker"
    """Task i goes to worker i."""


class Rounds(StrEnum):
    FIND_VERIFY = "find-verify"
    FIND_REFUTE_CONFIRM = "find-refute-confirm"


class PermissionPolicy(StrEnum):
    """How a tool call that needs approval is answered; the workers' hook answers, so no dialog blocks."""

    DENY = "deny"
    """Refuse the call and tell the agent to go on without it (safe, and the worker never stalls)."""
    APPROVE = "approve"
    """Allow the call (the agent's deny rules still apply; the container is the boundary)."""
    REPORT = "report"
    """Show the dialog, post it on the bus and wait for a human (`orch attach NAME --write`); the job
    timeout still runs."""


ScriptStep = dict[str, Any]


class AgentGroup(Strict):
    """Some workers of one agent and model."""

    agent: str = DEFAULT_AGENT
    """Agent adapter (`orch doctor` lists them; scripted is for tests of orch itself). Groups of different
    agents make a mixed fleet, whose findings go to verifiers of another kind first."""
    model: str | None = None
    """Model name passed to the agent (None: the agent's default)."""
    workers: int = Field(default=1, ge=1, le=MAX_WORKERS)
    """How many workers of this agent and model."""


class TaskSpec(Strict):
    id: str | None = Field(default=None, pattern=ID_PATTERN)
    """Short id (lowercase letters, digits, - and _); default t1, t2, ..."""
    role: Role = Role.FINDER
    """finder (reports structured findings, which get verified); writer (changes the tree, in a worktree of its
    own, through the gate); fixer or scribe (writers that run after verification, handed the confirmed
    findings). verifier and reviewer jobs are made by orch, never listed."""
    title: str | None = None
    """A few words for the report and the views (default: the id)."""
    goal: str = Field(min_length=1)
    """What to determine, phrased neutrally: "determine whether X holds", never "fix the X bug"."""
    files: list[str] = Field(default_factory=list)
    """Where to look (hints, relative to the workdir)."""
    worker: int | None = Field(default=None, ge=1, le=MAX_WORKERS)
    """Pin the task to this worker."""
    offline_script: list[ScriptStep] | None = None
    """Offline runs only: orch-script steps the scripted model makes the real agent execute."""
    allow: list[str] = Field(default_factory=list)
    """Writer tasks: protected paths (globs) this task may edit all the same (e.g. `tests/test_parser.py`
    for a task that adds a test)."""
    change: ChangeNeed | None = None
    """Writer tasks: `required` fails the task when its writer changes nothing; `optional` lets it pass. Default:
    optional, but a fixer handed confirmed findings must change something."""

    def needs_change(self, confirmed_findings: bool) -> bool:
        """Whether leaving the tree as it was fails this writer task."""
        if self.change is not None:
            return self.change is ChangeNeed.REQUIRED
        return self.role is Role.FIXER and confirmed_findings


class RoleSpec(Strict):
    template: str | None = None
    """The brief template ({{placeholders}}); default: the role's template shipped with orch."""
    template_file: Path | None = None
    """Or read the template from this file (relative to the spec)."""
    offline_script: list[ScriptStep] | None = None
    """Offline runs only: steps for every job of this role (a task's own script wins)."""


class VerificationSpec(Strict):
    rounds: Rounds = Rounds.FIND_VERIFY
    """find-verify, or find-refute-confirm: round 2 tries to refute, round 3 re-checks the survivors."""
    verifiers_per_finding: int = Field(default=1, ge=1, le=MAX_WORKERS - 1)
    """Verifiers per finding per round; never the finder."""
    quorum: int | None = Field(default=None, ge=1)
    """Agreeing valid verdicts needed to settle a finding (default: verifiers_per_finding)."""
    prefer_other_agent: bool = True
    """Give a finding to a verifier of another agent or model than its finder when the fleet has one."""
    evidence_window: int = Field(default=3, ge=0, le=50)
    """A quote counts when found within this many lines of the cited line."""
    reproduce_timeout: float = Field(default=120.0, gt=0)
    """Seconds orch gives a finding's `reproduce` command, which it runs in the checks' sandbox on a copy of the
    tree under audit before the finding's verifiers start (orch.lead.reproduce); then it is stopped."""
    isolation: Isolation | None = None
    """strict: each worker in a sandbox of its own (its own uid in a container, its own bubblewrap sandbox on
    this machine), writing only its own outbox (a writer also its own worktree), the tree under audit
    read-only. shared: one uid for all, for debugging. Default: strict wherever every agent of the fleet can
    run so (all of them can)."""

    def needed(self) -> int:
        return self.quorum or self.verifiers_per_finding


class Timeouts(Strict):
    boot: float = Field(default=90.0, gt=0)
    """Seconds for the workers to start."""
    job: float = Field(default=1800.0, gt=0)
    """Seconds one job (a task or a verification) may take, corrections included."""
    run: float = Field(default=7200.0, gt=0)
    """Seconds for the whole run; then it stops as failed."""


class Limits(Strict):
    nudge_after: float = Field(default=120.0, gt=0)
    """Seconds a worker may sit idle without its done flag before it is nudged."""
    max_nudges: int = Field(default=3, ge=0)
    """Nudges per job before the job fails."""
    max_corrections: int = Field(default=2, ge=0)
    """Times a worker is told what is wrong with its output and asked again, before the job fails."""
    max_restarts: int = Field(default=2, ge=0)
    """Restarts per worker after a crash (each resumes its session and re-points it at its brief)."""
    restart_backoff: float = Field(default=2.0, ge=0)
    """First wait before a restart; doubles for each further restart of that worker."""
    restart_backoff_max: float = Field(default=60.0, ge=0)
    """The longest wait before a restart, however many came before."""
    max_relaunches: int = Field(default=2, ge=0)
    """Times the whole fleet is relaunched (sessions resumed) after its tmux server died under the controller."""
    rate_limit_wait: float = Field(default=60.0, ge=0)
    """Seconds to wait after a rate-limit or overload error before telling the worker to continue, when the
    gateway saw no retry-after from the API (with one, the controller waits that long instead)."""
    max_rate_limit_waits: int = Field(default=10, ge=0)
    """Turns per job that may end on a rate limit or a transient API error (retried after `restart_backoff`)."""
    # The per-worker caps (SECURITY.md, "Caps"; `orch up --pids-per-worker ...`); `off`: none.
    pids_per_worker: Count = WORKER_PIDS
    """Processes and threads one worker may have; at the cap its processes are killed and its job fails."""
    memory_per_worker: Size = byte_size(WORKER_MEMORY)  # type: ignore[assignment]
    """Resident memory of one worker's processes together (`2g`, `512m`)."""
    disk_per_worker: Size = byte_size(WORKER_DISK)  # type: ignore[assignment]
    """Bytes one worker may write (outbox, session store, config dir, tmp); also each file's cap."""
    run_folder_max: Size = byte_size(RUN_FOLDER_MAX)  # type: ignore[assignment]
    """The run folder's cap: past it, its biggest writer is stopped and its job fails."""

    def caps(self) -> WorkerCaps:
        return WorkerCaps(
            pids=self.pids_per_worker,
            memory=self.memory_per_worker,
            disk=self.disk_per_worker,
            run_folder=self.run_folder_max,
        )


class Budget(Strict):
    """Caps the controller sends the run's model gateway, which refuses a request at or over one; the
    controller stops the run (fleet caps) or a worker (per-worker caps) once the gateway refuses it.
    Tokens count every token the API reported, cached ones included (orch.gateway.modeldir.Tokens.total)."""

    max_cost_usd: float | None = Field(default=None, gt=0)
    """Stop the run (as failed) once the fleet's cost passes this."""
    max_cost_per_worker_usd: float | None = Field(default=None, gt=0)
    """A worker past this gets no further jobs (its running job fails)."""
    max_tokens: int | None = Field(default=None, gt=0)
    """Stop the run (as failed) once the fleet's tokens pass this."""
    max_tokens_per_worker: int | None = Field(default=None, gt=0)
    """A worker past this many tokens gets no further jobs (its running job fails)."""


class ChangesSpec(Strict):
    """How writers' changes are gated and integrated (orch.lead.changes)."""

    reviewers_per_change: int = Field(default=1, ge=0, le=MAX_WORKERS - 1)
    """Workers who try to refute each change, never its writer (0: no review; the checks and scope still gate)."""
    max_rebases: int = Field(default=2, ge=0, le=10)
    """Times a change that conflicts or breaks a check once integrated goes back to its writer."""
    max_file_bytes: int = Field(default=1 << 20, ge=1)
    """A change with a file larger than this is refused (the file is named in the report)."""
    max_files: int = Field(default=100_000, ge=1)
    """A worktree with more files than this is refused whole."""
    check_timeout: float = Field(default=600.0, gt=0)
    """Seconds each check command may run in the sandbox before it counts as failed."""
    check_output_bytes: int = Field(default=64 << 10, ge=1024)
    """The tail of each check's output kept as evidence (checks.json); the rest is discarded as it comes."""


class FleetSpec(Strict):
    """A fleet to run to completion: `orch run FLEET.yaml`."""

    name: str | None = Field(default=None, pattern=NAME_RE.pattern)
    """Default run name (`--name` wins)."""
    workdir: Path = Path()
    """The folder the workers work in (relative to the spec file)."""
    agent: str = DEFAULT_AGENT
    """The agent CLI of every worker: claude, codex, gemini, opencode or aider (`orch doctor` lists them)."""
    model: str | None = None
    """Model name passed to the agent (None: the agent's default)."""
    workers: int | None = Field(default=None, ge=1, le=MAX_WORKERS)
    """Worker count (default: one per task, at least enough to verify). Or give `agents` instead."""
    agents: list[AgentGroup] | None = None
    """Groups of workers by agent and model (instead of agent/model/workers)."""
    permission_mode: str | None = None
    """Agent permission mode (default: the agent's own: claude acceptEdits with an allowlist)."""
    dispatch: Dispatch = Dispatch.QUEUE
    """queue: free workers take the next pending task (tasks may outnumber workers); per-worker: task i goes
    to worker i."""
    tasks: list[TaskSpec] = Field(min_length=1)
    """What the fleet is asked to do, one entry per task (at least one)."""
    roles: dict[Role, RoleSpec] = Field(default_factory=dict)
    """A role's brief template or offline steps, by role name (default: the templates shipped with orch)."""
    verification: VerificationSpec = Field(default_factory=VerificationSpec)
    """How findings are verified: rounds, verifiers per finding, quorum, isolation."""
    timeouts: Timeouts = Field(default_factory=Timeouts)
    """Seconds for booting, for each job, for the whole run."""
    limits: Limits = Field(default_factory=Limits)
    """Nudges, corrections, restarts, rate-limit waits, and each worker's caps."""
    budget: Budget = Field(default_factory=Budget)
    """Caps on cost and tokens, enforced by the run's model gateway (default: none)."""
    permissions: PermissionPolicy = PermissionPolicy.DENY
    """How a tool call that needs approval (a permission prompt) is answered: deny, approve or report."""
    checks: list[str] = Field(default_factory=list)
    """Shell commands run in the tree's root by the controller (never a worker) in a disposable sandbox with
    no network: on the base once, then on every change. A check that passed on the base must still pass."""
    protect: list[str] | None = None
    """Globs of paths a change may not edit (default: orch.spec.model.DEFAULT_PROTECT, the tests and the checks'
    configuration). A list replaces the default; a list whose entries all start with + extends it."""
    changes: ChangesSpec = Field(default_factory=ChangesSpec)
    """How writers' changes are reviewed and integrated."""
    offline: bool = False
    """Drive the agents with orch's scripted model server (no credentials; steps from offline_script)."""
    teardown: bool = True
    """Stop the fleet when the run ends (its folder, transcripts and report stay)."""
    fail_on: FailOn = FailOn.NEVER
    """Which CONFIRMED findings fail the run (exit 6): never (the default: findings are the run's result),
    or those of this severity or above (info, low, medium, high, critical). `orch run --fail-on` wins."""
    notify: NotifyConfig = Field(default_factory=NotifyConfig)
    """Who hears when the run needs a person, over the user's config file (docs/notify.md); webhooks as ${VAR}."""
    placement: PlacementSpec = Field(default_factory=PlacementSpec)
    """Where on a swarm's nodes the run may go (`--backend swarm` only; docs/scale-out.md)."""

    @field_validator("notify")
    @classmethod
    def _no_webhook_url(cls, value: NotifyConfig) -> NotifyConfig:
        problems = spec_problems(value)
        if problems:
            raise ValueError(problems[0])
        return value

    @field_validator(
        "roles", "verification", "timeouts", "limits", "budget", "changes", "notify", "placement", mode="before"
    )
    @classmethod
    def _empty_section_is_default(cls, value: Any) -> Any:
        """A section whose keys are all commented out is null in YAML: take the defaults."""
        return {} if value is None else value

    # --- derived -------------------------------------------------------------------------------
    def groups(self) -> list[AgentGroup]:
        if self.agents:
            return self.agents
        return [AgentGroup(agent=self.agent, model=self.model, workers=self.worker_count())]

    def worker_count(self) -> int:
        if self.agents:
            return sum(g.workers for g in self.agents)
        if self.workers is not None:
            return self.workers
        finders = any(t.role is Role.FINDER for t in self.tasks)
        need = self.verification.verifiers_per_finding + 1 if finders else 1
        if any(t.role in WRITER_ROLES for t in self.tasks):  # a change's reviewers are never its writer
            need = max(need, self.changes.reviewers_per_change + 1)
        return max(len(self.tasks), need)

    def agent_models(self) -> dict[int, tuple[str, str | None]]:
        """Worker number -> (agent, model)."""
        out: dict[int, tuple[str, str | None]] = {}
        for group in self.groups():
            for _ in range(group.workers):
                out[len(out) + 1] = (group.agent, group.model)
        return out

    def writer_tasks(self) -> list[str]:
        """Ids of the tasks whose jobs change the tree (writer, fixer, scribe)."""
        return [tid for tid, t in zip(self.task_ids(), self.tasks, strict=True) if t.role in WRITER_ROLES]

    def protected(self) -> list[str]:
        """The protected globs in force: the default, replaced or extended by `protect:`."""
        if self.protect is None:
            return list(DEFAULT_PROTECT)
        if self.protect and all(p.startswith("+") for p in self.protect):
            return [*DEFAULT_PROTECT, *(p[1:] for p in self.protect)]
        return list(self.protect)

    def task_ids(self) -> list[str]:
        return [t.id or f"t{i}" for i, t in enumerate(self.tasks, 1)]

    def template(self, role: Role) -> str:
        custom = self.roles.get(role)
        if custom is not None and custom.template is not None:
            return custom.template
        return default_template(role)


def default_template(role: Role) -> str:
    return (resources.files("orch") / "data" / "roles" / f"{role.value}.md").read_text(encoding="utf-8")


def example_spec() -> str:
    """The commented example `orch spec init` writes."""
    return (resources.files("orch") / "data" / "fleet.example.yaml").read_text(encoding="utf-8")

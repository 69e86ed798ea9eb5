"""The run folder: the contract between orch, its workers and the humans watching.

This is the only module that knows the file names inside a run folder; everything else asks it.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from pathlib import Path

from orch.errors import NotFoundError, UsageError
from orch.run.files import JsonlTail, append_line, atomic_write, read_model
from orch.run.paths import agents_dir, runs_dir
from orch.run.records import RUN_INFO, ControllerEvent, HookEvent, RunInfo, StatusLine
from orch.run.statusline import read_status_line

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAX_WORKERS = 64
EXCHANGES_RE = re.compile(r"exchanges-([0-9]+)\.jsonl\.gz")


def validate_name(name: str) -> str:
    """Run names become folder, tmux socket and container names: keep them boring."""
    if not NAME_RE.fullmatch(name) or ".." in name:
        raise UsageError(
            f"invalid run name {name!r}",
            hint="use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
        )
    return name


def validate_worker_count(n: int) -> int:
    if not 1 <= n <= MAX_WORKERS:
        raise UsageError(f"worker count {n} is out of range", hint=f"use 1 to {MAX_WORKERS}")
    return n


class RunFolder:
    """Paths and small file operations for one run folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._hook_logs: dict[int, JsonlTail[HookEvent]] = {}

    @classmethod
    def for_name(cls, name: str) -> RunFolder:
        return cls(runs_dir() / validate_name(name))

    @property
    def name(self) -> str:
        return self.root.name

    # --- the names (one place) -------------------------------------------------------------
    @property
    def run_json(self) -> Path:
        return self.root / "run.json"

    @property
    def bus(self) -> Path:
        return self.root / "bus.md"

    @property
    def bus_lock(self) -> Path:
        return self.root / ".bus.lock"

    @property
    def bus_socket(self) -> Path:
        """Under strict isolation, workers post here: the controller stamps the sender (orch.run.bus)."""
        return self.root / "bus.sock"

    @property
    def events(self) -> Path:
        return self.root / "events.jsonl"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def findings_dir(self) -> Path:
        return self.root / "findings"

    @property
    def verdicts_dir(self) -> Path:
        return self.root / "verdicts"

    def task(self, n: int) -> Path:
        return self.root / f"agent-{n}.task.md"

    # --- a worker's outbox: the only place worker n writes (strict isolation enforces it) ---
    @property
    def outbox_dir(self) -> Path:
        return self.root / "outbox"

    def outbox(self, n: int) -> Path:
        return self.outbox_dir / f"agent-{n}"

    def result(self, n: int) -> Path:
        """Worker n's result. No link at the top: agents write files by replacing them, which would
        replace a link rather than write through it."""
        return self.outbox(n) / "result.md"

    def done(self, n: int) -> Path:
        """Worker n's done flag."""
        return self.outbox(n) / "done"

    def clear_outbox(self, n: int, paths: Sequence[Path]) -> list[Path]:
        """Remove these files from worker n's outbox (the controller may: under strict isolation the outbox
        is group-writable for the run's gid); the ones that were there. Whatever a worker put in their place
        that cannot be removed (a folder, say) stays: the job token and the safe reader keep it from counting."""
        removed = []
        for path in paths:
            if path.parent != self.outbox(n):
                raise ValueError(f"{path} is not in worker {n}'s outbox")
            try:
                path.unlink()
            except OSError:
                continue
            removed.append(path)
        return removed

    def status_line(self, n: int) -> Path:
        return self.outbox(n) / "status.json"

    def outbox_findings(self, n: int, job: str) -> Path:
        """Where worker n writes the findings of its finder job `job`."""
        return self.outbox(n) / f"{job}.findings.json"

    def outbox_verdict(self, n: int, job: str) -> Path:
        """Where worker n writes the verdict of its verification job `job`."""
        return self.outbox(n) / f"{job}.verdict.json"

    def state(self, n: int) -> Path:
        """Worker n's hook log: written by its own hooks only (under strict isolation, its uid's file)."""
        return self.state_dir / f"agent-{n}.jsonl"

    @property
    def permission_policy(self) -> Path:
        """How the workers' permission hook answers a prompt (written by `orch run`; absent: ask)."""
        return self.state_dir / "permissions.json"

    # --- the model gateway's files (written by the gateway only; see orch.gateway.modeldir) ----
    @property
    def model_dir(self) -> Path:
        return self.root / "model"

    @property
    def model_usage(self) -> Path:
        return self.model_dir / "usage.json"

    @property
    def model_ledger(self) -> Path:
        return self.model_dir / "ledger.jsonl"

    @property
    def model_log(self) -> Path:
        return self.model_dir / "gateway.jsonl"

    @property
    def model_budget(self) -> Path:
        return self.model_dir / "budget.json"

    def exchanges(self, n: int) -> Path:
        return self.model_dir / f"exchanges-{n}.jsonl.gz"

    @property
    def replay_recording(self) -> Path:
        """A container run's copy of the exported recording it replays (`orch run --replay FILE`): put here
        by the host before the container starts, in the gateway's `model/` so that no worker can alter it."""
        return self.model_dir / "replay.orchrec.gz"

    def recordings(self) -> list[Path]:
        """The recording: each worker's `exchanges(n)` that exists, in worker order."""
        if not self.model_dir.is_dir():
            return []
        found = {int(m[1]): p for p in self.model_dir.iterdir() if (m := EXCHANGES_RE.fullmatch(p.name))}
        return [found[n] for n in sorted(found)]

    @property
    def sessions_dir(self) -> Path:
        """Agent session transcripts of containerised runs, kept so `orch up --resume` can resume them."""
        return self.root / "sessions"

    def sessions(self, n: int) -> Path:
        return self.sessions_dir / f"agent-{n}"

    def log(self, n: int) -> Path:
        """Everything worker n's pane printed, escapes and redraws included (tmux's pipe-pane)."""
        return self.logs_dir / f"agent-{n}.log"

    def transcript(self, n: int) -> Path:
        """Worker n's log rendered as the text its terminal showed (orch.run.terminal): what the report links."""
        return self.logs_dir / f"agent-{n}.txt"

    @property
    def pane_sizes(self) -> Path:
        """Each worker's pane size once every pane exists (columns, lines): what its log is rendered at."""
        return self.logs_dir / "panes.json"

    @property
    def config_root(self) -> Path:
        """The run's agent config dirs, outside the run folder: they may hold credentials."""
        return agents_dir() / self.name

    def config_dir(self, n: int) -> Path:
        """The worker's isolated agent config dir."""
        return self.config_root / f"agent-{n}"

    # --- the automated lead (orch run): its spec, state, per-job files and reports ---------
    @property
    def fleet_spec(self) -> Path:
        """The fleet spec the controller runs, resolved (JSON): what `orch run --resume` reloads."""
        return self.root / "fleet.json"

    @property
    def tree_snapshot(self) -> Path:
        """The workdir's files as the run found them (orch.lead.treecheck; shared isolation only)."""
        return self.root / "tree.json"

    @property
    def controller_state(self) -> Path:
        """The controller's saved state: jobs, accepted findings and verdicts, flags, outcome."""
        return self.root / "controller.json"

    @property
    def controller_lock(self) -> Path:
        """Held (flock) by the one controller driving this run."""
        return self.root / ".controller.lock"

    @property
    def notify_muted(self) -> Path:
        """Present while `orch notify mute NAME` silences the run's notifications (orch.notify.follow)."""
        return self.root / "notify.muted"

    @property
    def notify_lock(self) -> Path:
        """Held (flock) by the detached notifier of an `orch up` run, which writes its pid in it."""
        return self.root / ".notify.lock"

    @property
    def serve_lock(self) -> Path:
        """Held (flock, shared) by `orch serve-run` while it serves this run in its container: another
        container on the same runs volume (compose) sees the run in use."""
        return self.root / ".serve.lock"

    def findings_file(self, job: str) -> Path:
        """A finder job's findings as the controller accepted them (JSON; the worker writes
        `outbox_findings`, the controller copies what it validated here)."""
        return self.findings_dir / f"{job}.json"

    def verdict_file(self, job: str) -> Path:
        """A verification job's verdict as the controller accepted it (the worker writes `outbox_verdict`)."""
        return self.verdicts_dir / f"{job}.json"

    @property
    def jobs_dir(self) -> Path:
        """Briefs and results of finished jobs, kept once agent-N.task.md / .result.md are reused."""
        return self.root / "jobs"

    def job_brief(self, job: str) -> Path:
        return self.jobs_dir / f"{job}.task.md"

    def job_result(self, job: str) -> Path:
        return self.jobs_dir / f"{job}.result.md"

    # --- changes (orch.lead.changes): the run's own repository, writers' worktrees, gated changes ---
    @property
    def repo_dir(self) -> Path:
        """The run's own bare git repository: the base commit and branch `orch/<run>` (the integration head).
        Only the controller writes it; the user's repository is only ever read (orch.lead.changes.repo)."""
        return self.root / "repo.git"

    @property
    def repo_info(self) -> Path:
        """Where the run's repository came from: the user's repository, the base, snapshot or not."""
        return self.root / "repo.json"

    @property
    def worktrees_root(self) -> Path:
        return self.root / "worktrees"

    def worktrees_dir(self, n: int) -> Path:
        """The one tree worker n may write besides its outbox: its writer jobs' worktrees go here."""
        return self.worktrees_root / f"agent-{n}"

    @property
    def changes_dir(self) -> Path:
        return self.root / "changes"

    def change_dir(self, job: str) -> Path:
        """A writer job's change as the controller took it: patch.diff, diffstat.txt, summary.md,
        change.json, checks.json, reviews/."""
        return self.changes_dir / job

    def change_patch(self, job: str) -> Path:
        return self.change_dir(job) / "patch.diff"

    def change_diffstat(self, job: str) -> Path:
        return self.change_dir(job) / "diffstat.txt"

    def change_summary(self, job: str) -> Path:
        """The writer's summary of its change (the commit message's body)."""
        return self.change_dir(job) / "summary.md"

    def change_record(self, job: str) -> Path:
        """change.json: the change as taken (orch.jobs.changes.Change)."""
        return self.change_dir(job) / "change.json"

    def change_checks(self, job: str) -> Path:
        """The checks on the change's tree (base + patch)."""
        return self.change_dir(job) / "checks.json"

    def change_integrated_checks(self, job: str) -> Path:
        """The checks on the integration head with the change applied (orch.lead.changes.queue)."""
        return self.change_dir(job) / "integrated.checks.json"

    def review_tree(self, change: str, review: str) -> Path:
        """The checkout review job `review` reads change `change` in."""
        return self.change_dir(change) / "reviews" / f"{review}.tree"

    def change_outcome(self, task: str) -> Path:
        """How writer task `task`'s change ended (a ChangeRow, written by the controller flow as it moves:
        report.json's `changes` are these)."""
        return self.changes_dir / "tasks" / f"{task}.json"

    @property
    def base_checks(self) -> Path:
        """The checks' results on the base (checks.json's shape), run once before any change."""
        return self.changes_dir / "base.checks.json"

    @property
    def queue_log(self) -> Path:
        """The integration queue's log: one JSON line per integration attempt (orch.lead.changes.queue)."""
        return self.changes_dir / "queue.jsonl"

    @property
    def report_md(self) -> Path:
        return self.root / "report.md"

    @property
    def report_json(self) -> Path:
        return self.root / "report.json"

    @property
    def report_html(self) -> Path:
        return self.root / "report.html"

    @property
    def report_sarif(self) -> Path:
        """The findings as SARIF 2.1.0, for code scanning (orch.report.sarif.render)."""
        return self.root / "report.sarif"

    @property
    def report_junit(self) -> Path:
        """Jobs and verifications as JUnit XML tests, for CI (orch.report.junit)."""
        return self.root / "report.junit.xml"

    # --- lifecycle -------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.run_json.is_file()

    def only_gateway(self) -> bool:
        """No run here yet, only what a container's init made for the gateway it started (compose)."""
        if not self.root.is_dir() or self.root.is_symlink() or self.exists():
            return False
        return {p.name for p in self.root.iterdir()} <= {self.model_dir.name, self.logs_dir.name}

    def create(self, info: RunInfo) -> None:
        """Create the folder tree and run.json: only the folders the run uses. An `orch run`'s controller makes
        findings/, verdicts/ and jobs/ as it needs them; a run with writers gets worktrees/ (its container's init
        gives each its worker) and changes/. The caller removes it if anything later fails."""
        try:
            self.root.mkdir(parents=True)
        except FileExistsError:
            if not self.only_gateway():
                raise
        self.logs_dir.mkdir(exist_ok=True)
        writers = (self.worktrees_root, self.changes_dir) if info.writers else ()
        for sub in (self.state_dir, self.outbox_dir, *writers):
            sub.mkdir()
        for n in range(1, info.workers + 1):
            self.outbox(n).mkdir()
            if info.writers:
                self.worktrees_dir(n).mkdir()
            self.state(n).touch()
        self.bus.touch()
        self.write_info(info)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.config_root, ignore_errors=True)

    def write_info(self, info: RunInfo) -> None:
        atomic_write(self.run_json, info.model_dump_json(indent=2) + "\n")

    def info(self) -> RunInfo:
        return read_model(
            self.run_json, RUN_INFO, NotFoundError(f"no run named {self.name!r}", hint="`orch ls` lists runs")
        )

    def check_worker(self, n: int) -> int:
        total = self.info().workers
        if not 1 <= n <= total:
            raise UsageError(f"worker {n} is out of range for run {self.name!r}", hint=f"use 1 to {total}")
        return n

    # --- readers ---------------------------------------------------------------------------
    def hook_events(self, n: int) -> Sequence[HookEvent]:
        """All parseable hook events of worker n; garbage lines are skipped, never fatal.

        Read incrementally: each call on this RunFolder parses only the lines added since the last.
        """
        return self._hook_logs.setdefault(n, JsonlTail(self.state(n), HookEvent)).records()

    def last_hook_event(self, n: int) -> HookEvent | None:
        events = self.hook_events(n)
        return events[-1] if events else None

    def status_line_info(self, n: int) -> StatusLine | None:
        """Worker n's latest status line (orch.run.statusline), None if it has none to read."""
        return read_status_line(self.status_line(n))

    def log_event(self, event: ControllerEvent) -> None:
        append_line(self.events, event.model_dump_json())


RELATIVE = RunFolder(Path())
"""The names relative to the run folder itself: how report.md, report.html and the CI formats link its files."""


def list_runs() -> list[RunFolder]:
    root = runs_dir()
    if not root.is_dir():
        return []
    return sorted((RunFolder(p) for p in root.iterdir() if (p / "run.json").is_file()), key=lambda r: r.name)

"""A run with writers, before it exists: the base chosen (reading the user's repository only), the checks'
sandbox found working, the run's repository built in a private temporary folder and the checks run on the
base there (a check that does not exist is refused now). `install` moves it all into the new run folder;
anything that fails before leaves nothing behind."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from orch.errors import NotFoundError
from orch.jobs.changes import ChecksRecord, RepoInfo
from orch.lead.changes.checkwatch import CheckLimits
from orch.lead.changes.gate import Host, baseline, check_commit, refuse_missing, sandbox_kind
from orch.lead.changes.repo import BaseChoice, RunRepo, build, choose_base, init_bare
from orch.lead.changes.scope import unmatched_globs
from orch.run.files import atomic_write, read_model
from orch.run.folder import RunFolder
from orch.run.paths import runs_dir
from orch.spec.model import FleetSpec


@dataclass
class Prepared:
    """A run's repository and base checks, made before the run folder; `install` or `discard` it."""

    choice: BaseChoice
    staging: Path
    """The temporary folder holding repo.git (on the run folders' filesystem, so install is a rename)."""
    info: RepoInfo
    baseline: ChecksRecord | None
    """None when the spec has no checks, or for a container run (its controller runs them there)."""
    warnings: list[str] = field(default_factory=list)
    """protect/allow globs that match no file of the base (said, not refused)."""

    def install(self, run: RunFolder) -> None:
        """Move the repository into `<run>/repo.git`, write repo.json and base.checks.json."""
        run.changes_dir.mkdir(exist_ok=True)
        os.replace(RunFolder(self.staging).repo_dir, run.repo_dir)
        atomic_write(run.repo_info, self.info.model_dump_json(indent=2) + "\n")
        if self.baseline is not None:
            atomic_write(run.base_checks, self.baseline.model_dump_json(indent=2) + "\n")
        self.discard()
        # Made as root for a container run whose uid is another (orch.backends.docker.mounts.make_run_folder gave the
        # run folder to it): the run's controller must own its repository too.
        owner = run.root.stat()
        if os.getuid() == 0 and owner.st_uid != 0:
            for path in (run.repo_dir, run.repo_info, run.changes_dir):
                _chown_tree(path, owner.st_uid, owner.st_gid)

    def discard(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


def prepare(spec: FleetSpec, name: str, base: str | None, snapshot: bool, checks_here: bool) -> Prepared:
    """Everything a run with writers needs that can be refused, done before the run exists. UsageError (one
    line) for: no git repository without --snapshot, a dirty tree without --snapshot, an unknown base, no
    working sandbox for the checks, a check command that does not exist (exit 127 on the base). `checks_here`:
    the checks run here on the base (a local run: `Backend.checks_at_start`); else the run's controller runs them
    where it lives (`ensure_baseline`): a container run's, and compose's (`orch run --prepare`, which holds no
    capability to start the checks' uid; its controller starts it through the run's tmux server)."""
    choice = choose_base(spec.workdir, base, snapshot)
    # A container run's checks run in its container (the checks' uid there): its controller runs them on
    # the base at its start (ensure_baseline), where a missing command stops the run in one line.
    if spec.checks and checks_here:
        sandbox_kind()  # refused in one line, saying how to fix it, before the base's checks could seem to fail
    runs_dir().mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".prepare-", dir=runs_dir()))
    try:
        staged = RunFolder(staging)  # the repository is made where a run folder keeps it, then moved
        init_bare(staged.repo_dir)
        info = build(staged.repo_dir, choice, name)
        repo = RunRepo(staged, info)
        record = None
        if spec.checks and checks_here:
            record = check_commit(repo, info.base, spec.checks, f"base {info.base}", limits=CheckLimits.of(spec))
            refuse_missing(record)
        warnings = glob_warnings(spec, repo.files(info.base))
        for result in record.results if record else []:
            if not result.passed:
                tail = " ".join(result.output_tail.split())[-120:]
                how = "timed out" if result.timed_out else f"exit {result.exit_code}"
                warnings.append(
                    f"check {result.command!r} fails on the base ({how}: {tail}): it cannot gate any change"
                )
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Prepared(choice, staging, info, record, warnings)


def glob_warnings(spec: FleetSpec, files: list[str]) -> list[str]:
    """The spec's own protect globs and the tasks' allow globs that match no file of the base."""
    out = []
    own = [g.removeprefix("+") for g in spec.protect or []]
    for glob in unmatched_globs(files, own):
        out.append(f"protect: {glob!r} matches no file of the base")
    for task_id, task in zip(spec.task_ids(), spec.tasks, strict=True):
        for glob in unmatched_globs(files, task.allow):
            out.append(f"tasks {task_id} allow: {glob!r} matches no file of the base (a new file may still match)")
    return out


def ensure_baseline(run: RunFolder, spec: FleetSpec) -> ChecksRecord | None:
    """base.checks.json, run now if it is not there yet (a container run's controller, at its start).
    UsageError when the sandbox does not work here or a check does not exist."""
    if not spec.checks:
        return None
    if run.base_checks.exists():
        return read_model(run.base_checks, ChecksRecord, NotFoundError(f"{run.base_checks} vanished"))
    sandbox_kind(Host.of(run.info()))
    return baseline(RunRepo.open(run), spec.checks, limits=CheckLimits.of(spec))


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    if not root.exists():
        return
    os.chown(root, uid, gid, follow_symlinks=False)
    for dirpath, dirnames, filenames in os.walk(root):
        for item in [*dirnames, *filenames]:
            os.chown(os.path.join(dirpath, item), uid, gid, follow_symlinks=False)

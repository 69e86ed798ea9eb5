"""The run's own git repository (`<run>/repo.git`): the base commit, the integration branch `orch/<run>`,
and checkouts of its commits into worktrees and sandboxes.

The user's repository and working tree are only ever read: the base is fetched from it (upload-pack reads;
nothing is written there), a snapshot is hashed into the run's repository through a private index, and
the dirty check runs with optional locks off (no index refresh). `choose_base` does every check before
anything is created, so bad input leaves nothing behind.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from orch.errors import NotFoundError, OrchError, UsageError
from orch.jobs.changes import RepoInfo
from orch.lead.changes.gitcmd import NEUTRAL_ATTRIBUTES, git, out
from orch.lead.changes.switch import can_switch, via_tmux
from orch.run.files import atomic_write, read_model
from orch.run.folder import RunFolder
from orch.run.uids import drop_argv

SNAPSHOT = "snapshot"


@dataclass(frozen=True)
class BaseChoice:
    """What a run with writers starts from, decided by reading the workdir only."""

    workdir: Path
    source: Path | None
    """The repository's top folder (None: the workdir is not in a git repository; snapshot only)."""
    subdir: str
    """The workdir inside the repository ('' at its top)."""
    commit: str | None
    """The base commit in the user's repository (None: a snapshot of a folder outside git)."""
    rev: str
    """What was asked: `HEAD`, the `--base` revision, or `snapshot`."""
    snapshot: bool


def choose_base(workdir: Path, base: str | None, snapshot: bool) -> BaseChoice:
    """Check the workdir for a run with writers, reading only. UsageError (one line) for: no git repository
    without --snapshot, a dirty tree without --snapshot or --base, a base revision that does not exist, --base
    with --snapshot."""
    if base is not None and snapshot:
        raise UsageError("give --base REV or --snapshot, not both", hint="--snapshot starts from the tree as it is")
    workdir = workdir.resolve()
    top = _user_git(workdir, "rev-parse", "--show-toplevel")
    if top is None:
        if not snapshot:
            raise UsageError(
                f"{workdir} is not in a git repository: a run with writers starts from a commit",
                hint="`git init` and commit it first, or pass --snapshot to take the folder as it is",
            )
        return BaseChoice(workdir, None, "", None, SNAPSHOT, True)
    source = Path(top).resolve()
    subdir = workdir.relative_to(source).as_posix() if workdir != source else ""
    rev = base or "HEAD"
    commit = _user_git(source, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
    if commit is None:
        if base is None and not snapshot:
            raise UsageError(f"the repository at {source} has no commit yet", hint="commit first, or pass --snapshot")
        if base is not None:
            raise UsageError(f"--base {base}: no such revision in {source}", hint="`git log` lists the commits")
    if snapshot:
        return BaseChoice(workdir, source, subdir, commit, SNAPSHOT, True)
    if base is not None:  # an explicit revision: uncommitted work is not what was asked for anyway
        assert commit is not None
        return BaseChoice(workdir, source, subdir, commit, rev, False)
    dirty = _user_git(source, "status", "--porcelain=v1", "--untracked-files=normal", "--ignore-submodules=all")
    if dirty:
        count = len(dirty.splitlines())
        raise UsageError(
            f"the working tree of {source} has {count} uncommitted change(s): a run starts from a commit",
            hint="commit (or stash) first, or pass --snapshot to take the tree as it is",
        )
    assert commit is not None
    return BaseChoice(workdir, source, subdir, commit, rev, False)


def _user_git(where: Path, *args: str) -> str | None:
    """Read the user's repository (stdout, stripped); None when git fails."""
    done = user_git(where, *args)
    return done.stdout.decode(errors="replace").strip() if done.returncode == 0 else None


def user_git(where: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """git in the user's repository: their own configuration, but no fsmonitor, no hooks, no optional locks
    (status would otherwise refresh and write the index), no prompt. orch only reads it, so it trusts that one
    repository though another uid owns it (a CI job's container runs as root over the runner's checkout: git
    would refuse it as "dubious ownership"), for these calls only, never in the user's configuration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"})
    trusted = f"safe.directory={_top(where)}"
    argv = ["git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", trusted]
    try:
        return subprocess.run(
            [*argv, *args], cwd=where, env=env, capture_output=True, check=False, stdin=subprocess.DEVNULL
        )
    except OSError as exc:
        return subprocess.CompletedProcess(args, 128, b"", str(exc).encode())


def _top(where: Path) -> Path:
    """The repository `where` is in, as git's safe.directory names it: the nearest folder with a `.git`."""
    where = where.resolve()
    return next((p for p in (where, *where.parents) if (p / ".git").exists()), where)


def upload_pack(source: Path) -> str:
    """The upload-pack a fetch from the user's repository runs there: it reads that repository as another
    process, which a `-c` on the fetch does not reach, so it is told to trust that repository itself (owned by
    another uid in a CI job's container) and to run no hook."""
    top = _top(source)  # upload-pack checks the git dir it enters; the worktree for good measure
    trusted = " ".join(f"-c {shlex.quote(f'safe.directory={path}')}" for path in (top, top / ".git"))
    return f"git {trusted} -c core.hooksPath=/dev/null upload-pack"


def init_bare(git_dir: Path) -> None:
    """An empty bare repository the controller alone owns (0700), with neutral attributes."""
    git(None, "init", "--quiet", "--bare", str(git_dir), cwd=git_dir.parent)
    git_dir.chmod(0o700)
    (git_dir / "hooks").mkdir(exist_ok=True)
    for hook in (git_dir / "hooks").iterdir():
        hook.unlink()
    info = git_dir / "info"
    info.mkdir(exist_ok=True)
    (info / "attributes").write_text(NEUTRAL_ATTRIBUTES)


def build(git_dir: Path, choice: BaseChoice, run: str) -> RepoInfo:
    """Fill an empty run repository from `choice`: the base commit (fetched from the user's repository, or a
    snapshot of the tree), branch `orch/<run>` at it. The user's repository is only read."""
    parent = choice.commit
    if choice.commit is not None and choice.source is not None:
        git(
            git_dir,
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            f"--upload-pack={upload_pack(choice.source)}",
            str(choice.source),
            f"{choice.commit}:refs/orch/source",
        )
    if choice.snapshot:
        commit = _snapshot(git_dir, choice.source or choice.workdir, parent)
    else:
        assert parent is not None
        commit = parent
    branch = branch_name(run)
    git(git_dir, "update-ref", f"refs/heads/{branch}", commit)
    git(git_dir, "update-ref", "refs/orch/base", commit)
    git(git_dir, "symbolic-ref", "HEAD", f"refs/heads/{branch}")
    return RepoInfo(
        source=str(choice.source) if choice.source else None,
        workdir=str(choice.workdir),
        base=commit,
        base_rev=choice.rev,
        snapshot=choice.snapshot,
        subdir=choice.subdir,
        branch=branch,
    )


def _snapshot(git_dir: Path, tree: Path, parent: str | None) -> str:
    """The tree as it is, into a commit (parent: the user's HEAD, if any) through a private index; the
    tree's .gitignore files are honoured, `.git` never taken."""
    with tempfile.TemporaryDirectory(prefix="orch-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index"), "GIT_WORK_TREE": str(tree)}
        if parent is not None:
            git(git_dir, "read-tree", parent, env=env)
        git(git_dir, "add", "--all", "--", ".", cwd=tree, env=env)
        sha = out(git_dir, "write-tree", env=env)
    args = ["commit-tree", sha, "-m", f"orch: snapshot of {tree}"]
    if parent is not None:
        args += ["-p", parent]
    return out(git_dir, *args)


def branch_name(run: str) -> str:
    """The integration branch of run `run`: `orch/<run>` (in the run's repository; `orch apply`'s default)."""
    return f"orch/{run}"


class RunRepo:
    """The run's repository; only the controller writes it (mode 0700: under strict isolation no worker
    uid can even read it)."""

    def __init__(self, run: RunFolder, info: RepoInfo) -> None:
        self.run = run
        self.info = info

    @classmethod
    def create(cls, run: RunFolder, workdir: Path, base: str | None, snapshot: bool) -> RunRepo:
        """Make `<run>/repo.git` with the base commit and branch `orch/<run>` at it, and repo.json.
        UsageError as `choose_base` (`orch run` calls orch.lead.changes.start.prepare before the run exists,
        so bad input creates nothing; this is the same for a folder that exists)."""
        choice = choose_base(workdir, base, snapshot)
        init_bare(run.repo_dir)
        try:
            info = build(run.repo_dir, choice, run.name)
        except BaseException:
            shutil.rmtree(run.repo_dir, ignore_errors=True)
            raise
        atomic_write(run.repo_info, info.model_dump_json(indent=2) + "\n")
        return cls(run, info)

    @classmethod
    def open(cls, run: RunFolder) -> RunRepo:
        """The run's repository as `create` left it (NotFoundError for a run without one)."""
        missing = NotFoundError(f"run {run.name!r} has no repository (it had no writer task)")
        info = read_model(run.repo_info, RepoInfo, missing)
        if not run.repo_dir.is_dir():
            raise missing
        return cls(run, info)

    @property
    def git_dir(self) -> Path:
        return self.run.repo_dir

    @property
    def base(self) -> str:
        """The base commit's sha."""
        return self.info.base

    @property
    def branch(self) -> str:
        return self.info.branch

    @property
    def subdir(self) -> str:
        """The workdir's path inside the tree: where a worker's workdir and the checks start."""
        return self.info.subdir

    def head(self) -> str:
        """The integration head: the commit `orch/<run>` points at (the base until a change lands)."""
        return out(self.git_dir, "rev-parse", "--verify", f"refs/heads/{self.branch}^{{commit}}")

    def checkout(self, commit: str, dest: Path, owner: int | None = None) -> None:
        """Write the files of `commit` into `dest` (an existing, empty folder): plain files, executable bits
        and symlinks as committed, no `.git` (nothing the controller would later trust), no attribute-driven
        conversion (the bytes as committed).

        `owner` (strict isolation: a worker's uid): the files become that uid's, so only that worker may write
        them; `dest` is the controller's, writable by the worker's group (orch.lead.changes.writing). The controller
        checks out into a private folder and the worker's uid copies what it holds into place (setpriv, no
        capabilities): the controller holds no CHOWN, and never writes into a folder a worker owns."""
        if owner is not None and owner != os.getuid():
            with tempfile.TemporaryDirectory(prefix="orch-checkout-") as tmp:
                staged = Path(tmp) / "tree"
                staged.mkdir()
                self.checkout(commit, staged)
                for folder in (Path(tmp), staged):
                    folder.chmod(0o755)
                # Each entry copied into `dest` (never `dest` itself: its mode and owner are the controller's).
                script = '[ -d "$2" ] && [ -z "$(ls -A -- "$2")" ] && '
                script += 'find "$1" -mindepth 1 -maxdepth 1 -exec cp -a -t "$2" -- {} +'
                argv = [*drop_argv(owner, owner), "/bin/sh", "-c", script, "orch-checkout", str(staged), str(dest)]
                code: int | None
                if can_switch(owner):
                    done = subprocess.run(argv, capture_output=True, check=False, stdin=subprocess.DEVNULL)
                    code, said_bytes = done.returncode, done.stderr
                else:  # a strict run's controller in its container: the run's tmux server may switch uid
                    ran = via_tmux(self.run.info().tmux_socket, argv, 600.0)
                    code, said_bytes = ran.code, ran.output
                if code != 0:
                    said = " ".join(said_bytes.decode(errors="replace").split())[-200:]
                    raise OrchError(
                        f"cannot check out {commit[:12]} into {dest} as uid {owner}: {said or 'not empty?'}"
                    )
            return
        if any(dest.iterdir()):
            raise ValueError(f"{dest} is not empty")
        with tempfile.TemporaryDirectory(prefix="orch-index-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index"), "GIT_WORK_TREE": str(dest)}
            git(self.git_dir, "read-tree", commit, env=env)
            # The neutral info/attributes keep every byte as committed; the private index goes with tmp.
            git(self.git_dir, "checkout-index", "--all", "--force", cwd=dest, env=env)

    def tree_of(self, commit: str) -> str:
        """The tree sha of a commit."""
        return out(self.git_dir, "rev-parse", "--verify", f"{commit}^{{tree}}")

    def files(self, commit: str) -> list[str]:
        """Every file path of a commit (from the tree's root)."""
        raw = git(self.git_dir, "ls-tree", "-r", "-z", "--name-only", "--full-tree", commit).stdout
        return [p.decode(errors="surrogateescape") for p in raw.split(b"\0") if p]

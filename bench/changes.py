"""Changes (issue 22): what the run's repository, the checks' sandbox and the integration queue cost.

- worktree: a writer's worktree made by `RunRepo.checkout` (a private index, checkout-index with neutral
  attributes) against a plain `git worktree add` of the same commit, on repositories of 1k, 10k and 50k
  files (quick: 1k);
- checks: the same check run in the sandbox (`gate.run_checks`: bubblewrap) and directly (`sh -c` in the
  tree), interleaved; target <= 1.2x;
- queue: 8 changes taken from worktrees of the same base, each editing its own file, integrated one after
  the other (7 of them three-way onto a moved head), with and without one check; no agent time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench.core import Context, Result
from bench.table import Row, Target
from orch.lead.changes.gate import run_checks, sandbox_available
from orch.lead.changes.queue import integrate
from orch.lead.changes.repo import RunRepo
from orch.lead.changes.take import take_change
from orch.run.folder import RunFolder
from orch.run.records import LocalRunInfo

SYSTEM_PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or "python3"
CHECK = f"{SYSTEM_PYTHON} -m compileall -q -f ."
"""The check both ways: byte-compiles every module of the tree (about as long as a small test suite). The
system's python by its path: a `python3` found through PATH may be a shim under the home folder (pyenv),
which the sandbox hides, and the two runs would not run the same interpreter."""
GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "b",
    "GIT_AUTHOR_EMAIL": "b@x",
    "GIT_COMMITTER_NAME": "b",
    "GIT_COMMITTER_EMAIL": "b@x",
}


def _git(repo: Path, *args: str) -> None:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, **GIT_ENV}
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)


def user_repo(root: Path, files: int) -> Path:
    """A repository of `files` small Python modules, 100 per folder, in one commit."""
    root.mkdir(parents=True)
    for i in range(files):
        folder = root / f"pkg{i // 100}"
        if i % 100 == 0:
            folder.mkdir()
        (folder / f"m{i}.py").write_text(f"VALUE = {i}\n\n\ndef f(x):\n    return x + VALUE\n")
    (root / "README.md").write_text("bench\n")
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "files")
    return root


def run_repo(ctx: Context, user: Path, name: str) -> RunRepo:
    run = RunFolder.for_name(name)
    run.create(
        LocalRunInfo(
            name=name,
            agent="scripted",
            workers=8,
            workdir=str(user),
            permission_mode="default",
            tmux_socket=f"orch-{name}",
            orch_version="bench",
        )
    )
    return RunRepo.create(run, user, None, False)


def _timed(fn: object) -> float:
    assert callable(fn)
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def worktrees(ctx: Context, sizes: tuple[int, ...]) -> tuple[list[Row], dict[str, list[float]]]:
    rows: list[Row] = []
    raw: dict[str, list[float]] = {}
    for n in sizes:
        tmp = Path(tempfile.mkdtemp(dir=ctx.env.root))
        user = user_repo(tmp / "user", n)
        repo = run_repo(ctx, user, ctx.env.name("wt"))
        ours, plain = [], []
        for i in range(ctx.config.repeat):
            dest = tmp / f"ours{i}"
            dest.mkdir()
            ours.append(_timed(lambda repo=repo, dest=dest: repo.checkout(repo.head(), dest)))
            other = tmp / f"plain{i}"
            plain.append(
                _timed(lambda user=user, other=other: _git(user, "worktree", "add", "-q", "--detach", str(other)))
            )
        shutil.rmtree(tmp, ignore_errors=True)
        label = f"{n // 1000}k files"
        rows += [
            Row("changes", f"worktree, {label}: RunRepo.checkout", "s", ours),
            Row("changes", f"worktree, {label}: git worktree add", "s", plain),
            Row("changes", f"worktree, {label}: ratio", "x", [a / b for a, b in zip(ours, plain, strict=True)]),
        ]
        raw[f"checkout_{n}"], raw[f"worktree_add_{n}"] = ours, plain
    return rows, raw


def checks(ctx: Context) -> tuple[list[Row], dict[str, list[float]]]:
    tmp = Path(tempfile.mkdtemp(dir=ctx.env.root))
    tree = user_repo(tmp / "tree", 300)
    boxed, direct = [], []
    for _ in range(ctx.config.repeat * 5):  # interleaved: the same load on both
        boxed.append(run_checks([CHECK], tree)[0].seconds)
        direct.append(_timed(lambda: subprocess.run(["sh", "-c", CHECK], cwd=tree, check=True, capture_output=True)))
    empty_boxed, empty_direct = [], []
    for _ in range(ctx.config.repeat * 5):  # the sandbox's fixed cost: a check that does nothing
        empty_boxed.append(run_checks(["true"], tree)[0].seconds)
        empty_direct.append(_timed(lambda: subprocess.run(["sh", "-c", "true"], cwd=tree, check=True)))
    shutil.rmtree(tmp, ignore_errors=True)
    ratio = [a / b for a, b in zip(boxed, direct, strict=True)]
    fixed = [(a - b) * 1000 for a, b in zip(empty_boxed, empty_direct, strict=True)]
    rows = [
        Row("changes", "checks sandbox, fixed cost (`true` sandboxed minus direct)", "ms", fixed),
        Row("changes", f"check `{CHECK}` (300 modules), sandboxed", "s", boxed),
        Row("changes", "the same check, directly", "s", direct),
        Row("changes", "checks sandbox / direct", "x", ratio, Target("<=", 1.2, "<= 1.2x")),
    ]
    return rows, {"sandboxed": boxed, "direct": direct, "fixed_ms": fixed}


def queue(ctx: Context, with_check: bool) -> list[float]:
    out = []
    for _ in range(ctx.config.repeat):
        tmp = Path(tempfile.mkdtemp(dir=ctx.env.root))
        user = user_repo(tmp / "user", 1000)
        repo = run_repo(ctx, user, ctx.env.name("queue"))
        changes = []
        for w in range(1, 9):
            wt = repo.run.worktrees_dir(w) / "job"
            wt.mkdir()
            repo.checkout(repo.base, wt)
            (wt / f"pkg{w}" / f"m{w * 100}.py").write_text(f"VALUE = {w}\n")
            changes.append(take_change(repo, wt, repo.base, f"t{w}-a", "bench", task=f"t{w}", writer=w))
        commands = ["test -f README.md"] if with_check else []
        started = time.perf_counter()
        for change in changes:
            if integrate(repo, change, commands).commit is None:
                raise RuntimeError(f"{change.job} did not land")
        out.append(8 / (time.perf_counter() - started))
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def run(ctx: Context) -> Result:
    rows, raw = worktrees(ctx, (1000,) if ctx.config.quick else (1000, 10_000, 50_000))
    why = sandbox_available()
    if why is None:
        more, checks_raw = checks(ctx)
        rows += more
        raw.update(checks_raw)
    bare = queue(ctx, with_check=False)
    rows.append(Row("changes", "queue: 8 approved changes, no check", "changes/s", bare))
    raw["queue_bare"] = bare
    if why is None:
        checked = queue(ctx, with_check=True)
        rows.append(Row("changes", "queue: 8 approved changes, one check each (sandboxed)", "changes/s", checked))
        raw["queue_checked"] = checked
    else:
        raw["sandbox"] = why  # type: ignore[assignment]
    return Result(rows=rows, raw=raw)

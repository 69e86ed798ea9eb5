"""`orch apply NAME [--branch B]`: the run's landed branch fetched into the user's repository as a new
branch. The working tree, the index, HEAD and every existing branch are left as they are: git fetch into a
new ref writes objects and that one ref, nothing else (no FETCH_HEAD either)."""

from __future__ import annotations

from pathlib import Path

from orch.errors import OrchError, UsageError
from orch.lead.changes import links
from orch.lead.changes.repo import RunRepo, branch_name, user_git
from orch.run.folder import RunFolder


def apply_run(run: RunFolder, cwd: Path, branch: str | None = None) -> str:
    """Fetch `orch/<run>` from the run's repository into the repository at `cwd` (which must be the run's
    source repository) as `branch` (default `orch/<run>`); the branch name. UsageError (one line, nothing
    written) outside that repository, for a run without a repository, or for a branch that exists."""
    repo = RunRepo.open(run)
    source = repo.info.source
    if source is None:
        raise UsageError(
            f"run {run.name} started from a folder outside git (--snapshot): there is no repository to apply it to",
            hint=f"git fetch {repo.git_dir} {repo.branch} from a repository of your own",
        )
    top = user_git(cwd, "rev-parse", "--show-toplevel")
    where = Path(top.stdout.decode().strip()).resolve() if top.returncode == 0 else None
    if where != Path(source):
        raise UsageError(
            f"{cwd} is not in run {run.name}'s repository ({source})", hint=f"cd {source} && orch apply {run.name}"
        )
    name = branch or branch_name(run.name)
    if user_git(where, "check-ref-format", "--branch", name).returncode != 0:
        raise UsageError(f"--branch {name!r} is not a valid branch name", hint="e.g. --branch orch/fixes")
    if user_git(where, "show-ref", "--verify", "--quiet", f"refs/heads/{name}").returncode == 0:
        raise UsageError(
            f"branch {name} already exists in {source}; orch apply never overwrites a branch",
            hint="pass --branch NEW-NAME, or delete the old branch first",
        )
    head = repo.head()
    if head == repo.base:
        raise OrchError(f"nothing landed in run {run.name}: {repo.branch} is still its base", hint="see its report")
    if led_out := links.problems(repo, head, repo.base):  # the queue refuses these: a branch made otherwise
        raise OrchError(
            f"{repo.branch} holds a link that leads out of the repository: {'; '.join(led_out)}",
            hint="nothing was fetched; inspect the run's repository by hand",
        )
    # The run's repository may be another uid's (a container run's): upload-pack, reading it, would refuse it
    # as "dubious ownership" without its own safe.directory (a -c on fetch does not reach it).
    upload = "git -c safe.directory='*' -c core.hooksPath=/dev/null upload-pack"
    done = user_git(
        where,
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        f"--upload-pack={upload}",
        str(repo.git_dir),
        f"{head}:refs/heads/{name}",
    )
    if done.returncode != 0:
        said = " ".join(done.stderr.decode(errors="replace").split())[-300:]
        raise OrchError(f"git fetch from run {run.name}'s repository failed: {said}")
    return name

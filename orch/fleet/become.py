"""A strict-isolation pane's first step as its own worker: `python -m orch.fleet.become FD`.

Under strict isolation (orch.run.uids) the run's tmux server, which alone keeps SETUID and SETGID, starts
worker N's pane as

    sh -c 'exec 3<BUNDLE; rm BUNDLE; exec "$@"' orch-launch BUNDLE setpriv --reuid=W ... -- \\
        sh -c SUPERVISOR orch-agent python -m orch.fleet.become 3

The bundle (the worker's context and its own gateway token) is a file only the controller's uid can read;
the pane opens it before it drops to the worker's uid and hands it over as an open descriptor, so the
token is never in a file, command line or environment another worker can read. Here, as the worker, this
seeds the worker's own config dir (the adapter's `prepare`, which a controller of another uid could not
write) and then becomes the agent.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pydantic import ValidationError

from orch.agents.registry import get_adapter
from orch.contracts import WorkerContext
from orch.errors import OrchError
from orch.run.folder import RunFolder
from orch.run.records import Strict

MODULE_ARGV = [sys.executable, "-P", "-m", "orch.fleet.become"]
"""How a pane runs this module as its worker (its bundle's descriptor after it). `-P`: the pane's cwd (a writer's
worktree, a reviewer's checkout of another worker's change) is not put first on the module path, where an `orch/`
planted in it would be imported in place of orch's own, as the worker, its launch bundle open."""
MAX_BUNDLE = 1 << 20
OPEN_BUNDLE = 'exec 3<"$1" || exit 126; rm -f -- "$1"; shift; exec "$@"'
"""The pane's first shell, still the controller's uid: open the bundle, remove it, become the worker."""


class LaunchBundle(Strict):
    """What worker n needs to start, handed from the controller to its pane (never written where a
    worker can read it)."""

    agent: str
    run: str
    worker: int
    workers: int
    workdir: str
    config_dir: str
    permission_mode: str
    model: str | None = None
    prompt: str | None = None
    resume_session: str | None = None
    env: dict[str, str]
    """The worker's own variables: its gateway base URL and token."""
    pane_socket: str | None = None
    """For an `own_pane` agent: the relay's socket for its own pane (orch.backends.local.relay.own_pane_socket)."""
    boxed: bool = False
    """WorkerContext.boxed: its confinement encloses it."""

    @classmethod
    def of(cls, agent: str, ctx: WorkerContext, own: dict[str, str]) -> LaunchBundle:
        return cls(
            agent=agent,
            run=str(ctx.run.root),
            worker=ctx.worker,
            workers=ctx.workers,
            workdir=str(ctx.workdir),
            config_dir=str(ctx.config_dir),
            permission_mode=ctx.permission_mode,
            model=ctx.model,
            prompt=ctx.prompt,
            resume_session=ctx.resume_session,
            env=own,
            pane_socket=str(ctx.pane_socket) if ctx.pane_socket is not None else None,
            boxed=ctx.boxed,
        )


def read_bundle(fd: int) -> LaunchBundle:
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(MAX_BUNDLE + 1)
    if len(data) > MAX_BUNDLE:
        raise ValueError("the launch bundle is too large")
    return LaunchBundle.model_validate_json(data)


def become(bundle: LaunchBundle) -> None:
    """Seed this worker's config dir as the worker itself, then exec its agent (never returns)."""
    adapter = get_adapter(bundle.agent)
    run = RunFolder(Path(bundle.run))
    cfg = Path(bundle.config_dir)
    home = cfg / "home"  # the worker's own HOME: the run's is not its to write
    home.mkdir(mode=0o700, exist_ok=True)
    if adapter.facts.sessions is not None:  # the agent's sessions live in the run folder, for a resume
        link = cfg / adapter.facts.sessions.subdir
        if not link.is_symlink() and not link.exists():
            link.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # Gemini CLI's is `.gemini/tmp`
            link.symlink_to(run.sessions(bundle.worker), target_is_directory=True)
    env = {**os.environ, "HOME": str(home), **bundle.env}
    ctx = WorkerContext(
        run=run,
        worker=bundle.worker,
        workers=bundle.workers,
        workdir=Path(bundle.workdir),
        config_dir=cfg,
        permission_mode=bundle.permission_mode,
        env=env,
        model=bundle.model,
        prompt=bundle.prompt,
        resume_session=bundle.resume_session,
        pane_socket=Path(bundle.pane_socket) if bundle.pane_socket else None,
        boxed=bundle.boxed,
    )
    spec = adapter.prepare(ctx)
    os.chdir(spec.cwd)
    os.execvpe(spec.argv[0], spec.argv, {**env, **spec.env, **bundle.env})


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m orch.fleet.become FD", file=sys.stderr)
        return 2
    try:
        become(read_bundle(int(argv[0])))
    except (OrchError, OSError, ValueError, ValidationError) as exc:
        text = exc.one_line() if isinstance(exc, OrchError) else str(exc).splitlines()[0]
        print(f"orch: worker cannot start: {text}", file=sys.stderr)
        return 2
    return 0  # pragma: no cover - become execs


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

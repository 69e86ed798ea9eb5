"""`orch run SPEC... [--repo PATH ...]`: several runs from one command (orch.entry.many names them).

Every run is checked first (its spec, its repository, its name, what its sandbox would refuse): one problem
is one line and nothing is made. Then on a backend that places runs on its nodes (Swarm) they start side by
side, each placed by Swarm as it starts; on one machine (local, a container engine) one after another, as
their fleets would only compete for its cores. Each run's name and where it runs are printed as it starts,
its outcome as it ends; the command exits with the worst run's code (orch.entry.many.worst).
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orch import escape
from orch.backends.base import Backend, Placement
from orch.cli.notify import hosted
from orch.entry import many, runner
from orch.entry.preflight import Preflight, preflight
from orch.errors import OrchError, UsageError, is_environment_error, one_line
from orch.exitcodes import Exit
from orch.report.summary import RunsSummary, RunSummary, summary
from orch.run.folder import RunFolder
from orch.run.records import RunStatus
from orch.spec.load import load_spec
from orch.spec.model import FailOn, FleetSpec

STARTING = threading.Semaphore(4)
"""Runs made at once (their objects and folders): the rest wait their turn, then run side by side."""
TICK = 1.0
"""How often the side-by-side runs' records are read for where each started."""


@dataclass(frozen=True)
class Options:
    """What `orch run` gives every one of its runs."""

    replace: bool = False
    copy: bool = False
    base: str | None = None
    snapshot: bool = False
    fail_on: FailOn | None = None
    placed: Placement | None = None


def check_all(
    specs: Sequence[Path],
    repos: Sequence[Path],
    name: str | None,
    backend: Backend,
    opts: Options,
    checks: Callable[[FleetSpec], object],
) -> list[Preflight]:
    """Every run's checks, before any run is made: the first problem refused in one line naming its run."""
    workdir = repos[0].resolve() if repos and repos[0].is_dir() else None  # a spec's name needs no workdir of its own
    named = [(path, runner.run_name(load_spec(path, workdir=workdir), path, None)) for path in specs]
    found: list[Preflight] = []
    try:
        for planned in many.plan(named, repos, name):
            try:
                checked = preflight(
                    planned.spec, planned.name, backend, opts.replace, opts.copy, None, opts.base, opts.snapshot,
                    also=checks, fail_on=opts.fail_on, placement=opts.placed, workdir=planned.repo,
                )  # fmt: skip
                found.append(checked)
            except UsageError as exc:
                raise UsageError(f"run {planned.name} ({planned.describe()}): {exc.message}", hint=exc.hint) from None
    except BaseException:
        for each in found:
            each.discard()
        raise
    return found


class Runs:
    """The checked runs, started and driven to their ends: side by side where the backend places runs on its
    nodes, else one after another. `say`: where progress lines go."""

    def __init__(self, backend: Backend, opts: Options, notify: list[str] | None, say: Callable[[str], None]):
        self.backend, self.opts, self.notify, self.say = backend, opts, notify, say
        self._said: set[str] = set()
        self._lock = threading.Lock()

    def run(self, found: list[Preflight]) -> RunsSummary:
        if not self.backend.places:
            results = [self._one(each) for each in found]
        else:  # daemon threads: on ^C the runs keep running, and this process does not wait for their followers
            done: dict[int, RunSummary] = {}
            threads = [
                threading.Thread(target=lambda n=n, each=each: done.update({n: self._one(each)}), daemon=True)
                for n, each in enumerate(found)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                while thread.is_alive():
                    thread.join(TICK)
                    for each in found:
                        self._started(each.name)
            results = [done.get(n) or _crashed(each.name) for n, each in enumerate(found)]
        return RunsSummary(exit_code=many.worst([r.exit_code for r in results]), runs=results)

    def _one(self, found: Preflight) -> RunSummary:
        """One run made, driven to its end and summed up; one that did not start, or whose controller could not
        be followed, failed, with why (the others go on)."""
        run, opts = RunFolder.for_name(found.name), self.opts
        try:
            try:
                with STARTING:
                    runner.start(
                        found.spec, found.name, self.backend, opts.replace, opts.copy, None, found.prepared,
                        opts.placed,
                    )  # fmt: skip
            finally:
                found.discard()  # installed: nothing left; else its staging folder goes
            if not self.backend.places:
                self._started(found.name, ready=True)
            with hosted(run, self.notify, None):
                result = runner.drive(run, commentary=False)
            self._started(found.name, ready=True)
            done = summary(result.run, result.exit_code, result.report, result.stopped)
        except Exception as exc:  # besides OrchError, what the Docker SDK raises untranslated: this run failed alone
            if not isinstance(exc, OrchError) and not is_environment_error(exc):
                raise
            done = summary(run, Exit.FAILED, None).model_copy(update={"reason": f"did not run: {one_line(exc)}"})
        report = done.reports.get("html")
        reason = escape.terminal(done.reason)  # worker-named parts (a task, a finding) shown inert
        self.say(f"run {found.name}: {done.status} (exit {done.exit_code}): {reason}; {report or 'no report'}")
        return done

    def _started(self, name: str, ready: bool = False) -> None:
        """Say where run `name` runs, once, as soon as its record says its fleet started (`ready`: it has)."""
        run = RunFolder.for_name(name)
        with self._lock:
            if name in self._said or not run.run_json.is_file():
                return
            with contextlib.suppress(OrchError, OSError, ValueError):
                info = run.info()
                if ready or info.status is not RunStatus.STARTING:
                    self._said.add(name)
                    self.say(f"run {name}: started ({info.where})")


def _crashed(name: str) -> RunSummary:
    """A run whose follower crashed (its thread's traceback said why)."""
    failed = summary(RunFolder.for_name(name), Exit.ERROR, None)
    return failed.model_copy(update={"reason": "orch crashed following it"})


def last_line(result: RunsSummary) -> str:
    """The end of several runs: how many ended how, and the command's exit code."""
    counts = Counter(run.status for run in result.runs)
    tally = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    return f"{len(result.runs)} runs: {tally}; exit {result.exit_code} (the worst of theirs)"

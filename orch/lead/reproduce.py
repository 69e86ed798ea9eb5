"""A finding's `reproduce` command, run by orch itself: in the checks' sandbox (orch.lead.changes.gate: no network,
no credentials, no run folder, the checks' memory and disk caps), on a copy of the tree under audit, under
`verification.reproduce_timeout`,
off the controller's loop in its check pool. The finding's verifiers wait for it and get its exit code and output in
their brief, as evidence they may cite as run; so no verifier need run another worker's command as itself (one that
still does has whatever the command left behind stopped before its verdict is read: orch.lead.acceptance).

Where the checks' sandbox does not work here, nothing is run: the record says why, and the verifiers go ahead.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from orch.errors import OrchError
from orch.jobs.findings import MAX_OUTPUT, Reproduction
from orch.jobs.state import AcceptedFinding
from orch.lead.base import Part
from orch.lead.changes import gate
from orch.lead.changes.checkwatch import CheckLimits
from orch.lead.changes.stopper import Stopper
from orch.run.events import Event
from orch.run.files import atomic_write

WORK = "reproduce"
"""Its kind of work in the check pool (beside a change's gate and integration)."""
KEY = "reproduce:"
"""The pool's key of a finding's run: KEY + its id (no change id has a colon)."""


def reproduce(workdir: Path, command: str, limits: CheckLimits, host: gate.Host, stopper: Stopper) -> Reproduction:
    """Run `command` (`sh -c`) in the checks' sandbox, with their `limits`, on a fresh copy of `workdir` (the
    tree under audit is read-only in a container: the checks' uid could not be given it), from its root."""
    with tempfile.TemporaryDirectory(prefix="orch-reproduce-") as tmp:
        tree = Path(tmp) / "tree"
        try:
            shutil.copytree(workdir, tree, symlinks=True)
        except (OSError, shutil.Error) as exc:
            return Reproduction(command=command, error=f"the tree could not be copied: {exc}")
        (result,) = gate.run_checks([command], tree, limits=limits, host=host, stopper=stopper)
    return Reproduction(
        command=command,
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        seconds=result.seconds,
        output=result.output_tail[-MAX_OUTPUT:],
    )


class Reproducing(Part):
    def start(self) -> None:
        """Start the reproduce commands of accepted findings not yet run, as the pool has room; where the checks'
        sandbox does not work, record that instead (their verifiers need not wait)."""
        pool = self.desk.checks
        for item in self.state.findings:
            command = item.finding.reproduce
            if command is None or item.reproduced is not None or KEY + item.id in pool.running():
                continue
            why = gate.sandbox_available(self.desk.checks_host)
            if why is not None:
                self.record(item, Reproduction(command=command, error=why))
                continue
            if not pool.start(KEY + item.id, WORK, self._work(command)):
                return  # no room: the next step tries again
            self.desk.event(Event.REPRODUCE_STARTED, item.finder, finding=item.id)

    def _work(self, command: str) -> Callable[[Stopper], Reproduction]:
        timeout = self.spec.verification.reproduce_timeout
        workdir, limits = self.desk.workdir, dataclasses.replace(CheckLimits.of(self.spec), timeout=timeout)
        host = self.desk.checks_host
        return lambda stop: reproduce(workdir, command, limits, host, stop)

    def collect(self) -> None:
        """Take in the runs the pool finished (their verifiers may start now), then start more."""
        for ended in self.desk.checks.take({WORK}):
            item = self.state.finding(ended.change.removeprefix(KEY))
            value = ended.value
            if isinstance(value, Reproduction):
                self.record(item, value)
            else:
                self.record(item, Reproduction(command=item.finding.reproduce or "", error=ended.error or "no result"))
        self.start()

    def record(self, item: AcceptedFinding, reproduced: Reproduction) -> None:
        """Its run, in the controller's books and its own file (what `orch offline-verdict` reads)."""
        item.reproduced = reproduced
        try:
            atomic_write(self.run.reproduction(item.id), reproduced.model_dump_json(indent=2) + "\n")
        except (OSError, OrchError) as exc:  # the books keep it: the brief inlines it anyway
            reproduced.error = reproduced.error or f"its record could not be written: {exc}"
        self.desk.save()
        self.desk.event(
            Event.REPRODUCED,
            item.finder,
            finding=item.id,
            exit_code=reproduced.exit_code,
            timed_out=reproduced.timed_out,
            error=reproduced.error,
        )

"""The exit-status supervisor every pane runs its agent under, whatever confines it.

The pane runs `sh -c SUPERVISOR orch-agent ARGV...`: sh runs the agent in the foreground (it keeps the terminal)
and records how it ended in the worker's hook log, because tmux does not always reap a killed pane process. Its
state-file variable is also how a process of a worker sharing the controller's uid is told to be that worker's
(orch.fleet.confinement.Shared)."""

from __future__ import annotations

from orch import procs
from orch.contracts import LaunchSpec
from orch.fleet.workerstate import EXIT_EVENT
from orch.run.folder import RunFolder
from orch.settings.internal import STATE_FILE

SUPERVISOR = (
    '"$@"; s=$?; printf \'{"ts": %s, "hook_event_name": "%s", "status": %s}\\n\' '
    '"$(date +%s.%N)" "' + EXIT_EVENT + '" "$s" >> "$ORCH_STATE_FILE"; exit "$s"'
)


def supervised(spec: LaunchSpec, run: RunFolder, n: int) -> LaunchSpec:
    """Worker n's launch spec run under the supervisor, its state-file variable set."""
    env = {**spec.env, STATE_FILE.name: str(run.state(n))}
    return LaunchSpec(argv=["sh", "-c", SUPERVISOR, "orch-agent", *spec.argv], env=env, cwd=spec.cwd)


def supervisor_under(pid: int) -> int | None:
    """The supervising shell among pid's first descendants (a pane's first process, or a sandbox's), None if
    there is none (gone)."""
    level = [pid]
    for _ in range(4):
        for each in level:
            if procs.cmdline(each)[2:3] == [SUPERVISOR]:
                return each
        level = [child for each in level for child in procs.children(each)]
    return None

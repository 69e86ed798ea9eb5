"""Worker state, derived from hook events (primary) and the pane's life (crash detection)."""

from __future__ import annotations

from orch.fleet.tmux import PaneInfo
from orch.run.records import HookEvent, WorkerState

BUSY_EVENTS = {"UserPromptSubmit", "PreToolUse", "PostToolUse", "SubagentStop", "PreCompact"}
IDLE_EVENTS = {"SessionStart", "Stop"}
RETRYABLE_ERRORS = {"rate_limit", "overloaded"}
# StopFailure errors that another try cannot fix: the controller fails the job at once. Any other
# (server_error, unknown, max_output_tokens, ...) is worth one more turn after a short wait.
FATAL_ERRORS = {"authentication_failed", "billing_error", "invalid_request"}
ENDED = (WorkerState.EXITED, WorkerState.CRASHED)
"""The states of a worker whose agent is gone."""

ALIVE = PaneInfo(pane_id="", worker=0, window=0, dead=False, dead_status=None, dead_signal=None, pid=None,
                  current_command="")  # fmt: skip
"""A pane as far as a hook log tells: its agent's end shows as the wrapper's ProcessExit event."""

# Written by the launch wrapper (orch.fleet.supervisor.supervised) when the agent process ends: tmux does not
# always reap a killed pane process promptly, so its exit status is recorded by the wrapper instead.
EXIT_EVENT = "ProcessExit"


def exit_state(status: int | None) -> tuple[WorkerState, str]:
    if status == 0:
        return WorkerState.EXITED, "exit status 0"
    if status is not None and status > 128:
        return WorkerState.CRASHED, f"killed by signal {status - 128}"
    return WorkerState.CRASHED, f"exit status {status}"


def final_state(last: HookEvent | None) -> tuple[WorkerState, str]:
    """A worker's state once its run has ended, from its newest hook event: how its agent ended, or what it was
    doing when the run ended (never "no pane": every pane goes with the run)."""
    state, detail = derive_state(last, ALIVE)
    if state in ENDED:
        return state, detail or state.value
    was = f"{state.value}: {detail}" if detail else state.value
    return WorkerState.EXITED, f"{was} when the run ended"


def derive_state(last: HookEvent | None, pane: PaneInfo | None) -> tuple[WorkerState, str | None]:
    """Map the newest hook event and the pane's status to a state and a short detail."""
    if last is not None and last.hook_event_name == EXIT_EVENT:
        return exit_state(last.status)
    if pane is None:
        return WorkerState.EXITED, "no pane (run stopped)"
    if pane.dead:
        if pane.dead_signal:
            return WorkerState.CRASHED, f"killed by signal {pane.dead_signal}"
        if pane.dead_status:
            return WorkerState.CRASHED, f"exit status {pane.dead_status}"
        # tmux sometimes marks a pane dead before it has reaped the process (no status yet): an agent
        # that ended its session cleanly said so through its SessionEnd hook; anything else crashed.
        if last is not None and last.hook_event_name == "SessionEnd":
            return WorkerState.EXITED, f"exit status {pane.dead_status if pane.dead_status is not None else 0}"
        return WorkerState.CRASHED, "exited without ending its session (status unknown)"
    if last is None:
        return WorkerState.BOOTING, None
    name = last.hook_event_name
    if name in BUSY_EVENTS:
        return WorkerState.BUSY, last.tool_name
    if name in IDLE_EVENTS:
        return WorkerState.IDLE, None
    if last.unanswered():
        return WorkerState.WAITING_FOR_PERMISSION, last.tool_name
    if name == "PermissionRequest":  # answered by the hook from the run's policy: the agent goes on
        return WorkerState.BUSY, last.tool_name
    if name == "Notification":
        return WorkerState.IDLE, last.notification_type
    if name == "StopFailure":
        if last.error in RETRYABLE_ERRORS:
            return WorkerState.RATE_LIMITED, last.error
        return WorkerState.ERROR, last.error
    if name == "SessionEnd":
        return WorkerState.EXITED, last.reason
    return WorkerState.BUSY, name

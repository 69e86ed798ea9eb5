"""orch.fleet.workerstate: a worker's state from its newest hook event and its pane; its final state once the run
has ended."""

from __future__ import annotations

from typing import Any

import pytest

from orch.fleet.workerstate import ALIVE, derive_state, final_state
from orch.run.records import HookEvent, WorkerState

pytestmark = pytest.mark.pure


def event(name: str, **fields: Any) -> HookEvent:
    return HookEvent(ts=1.0, hook_event_name=name, **fields)


@pytest.mark.parametrize(
    ("last", "state", "detail"),
    [
        (None, WorkerState.EXITED, "booting when the run ended"),
        (event("Stop"), WorkerState.EXITED, "idle when the run ended"),
        (event("PreToolUse", tool_name="Bash"), WorkerState.EXITED, "busy: Bash when the run ended"),
        (event("StopFailure", error="rate_limit"), WorkerState.EXITED, "rate-limited: rate_limit when the run ended"),
        (event("ProcessExit", status=0), WorkerState.EXITED, "exit status 0"),
        (event("ProcessExit", status=137), WorkerState.CRASHED, "killed by signal 9"),
        (event("SessionEnd", reason="logout"), WorkerState.EXITED, "logout"),
    ],
    ids=["never-booted", "idle", "busy", "rate-limited", "exited-itself", "crashed", "session-ended"],
)
def test_a_final_state_is_how_the_agent_ended_or_what_it_was_doing(
    last: HookEvent | None, state: WorkerState, detail: str
) -> None:
    assert final_state(last) == (state, detail)


def test_a_live_pane_leaves_the_state_to_the_hooks_and_a_gone_one_says_so() -> None:
    assert derive_state(event("PreToolUse", tool_name="Bash"), ALIVE) == (WorkerState.BUSY, "Bash")
    assert derive_state(None, ALIVE) == (WorkerState.BOOTING, None)
    assert derive_state(event("Stop"), None)[0] is WorkerState.EXITED

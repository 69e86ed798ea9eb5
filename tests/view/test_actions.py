"""What `orch watch` does to a run (orch/view/actions.py) refused before anything runs: a worker out of range,
an empty, oversized or binary message, each one line; a nudge says what the controller itself would say, or
the generic nudge with no controller. (The actions done through the CLI: test_tui.py's keys, test_web.py's
--control.)"""

from __future__ import annotations

import pytest

from orch.errors import UsageError
from orch.jobs.state import ControllerState, Job, WorkerBook, save_state
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.spec.model import Role
from orch.view.actions import GENERIC_NUDGE, MAX_MESSAGE, Action, nudge_message, perform
from tests.helpers import run_info

pytestmark = pytest.mark.pure  # every case is refused before a process starts


@pytest.fixture
def run() -> RunFolder:
    folder = RunFolder.for_name("watched")
    folder.create(run_info("watched", workers=2))
    return folder


BAD: dict[str, tuple[Action, int | None, str, str]] = {
    "worker-zero": (Action.RESTART, 0, "", "worker 0 is out of range"),
    "worker-past-the-fleet": (Action.NUDGE, 3, "", "worker 3 is out of range"),
    "no-worker": (Action.SEND, None, "hi", "worker None is out of range"),
    "empty-message": (Action.SEND, 1, " \n\t", "empty message"),
    "oversized-message": (Action.SEND, 1, "x" * (MAX_MESSAGE + 1), "message too long or binary"),
    "binary-message": (Action.SEND, 1, "a\x00b", "message too long or binary"),
}


@pytest.mark.parametrize(("action", "worker", "text", "refusal"), BAD.values(), ids=BAD.keys())
def test_bad_actions_are_refused_before_anything_runs(
    run: RunFolder, action: Action, worker: int | None, text: str, refusal: str
) -> None:
    with pytest.raises(UsageError, match=refusal) as refused:
        perform(run, action, worker, text)
    assert "\n" not in refused.value.one_line()
    assert not run.events.exists() or Event.WATCH_ACTION not in run.events.read_text()  # nothing done, nothing logged


def test_a_nudge_says_what_the_controller_would(run: RunFolder) -> None:
    assert nudge_message(run, 1) == GENERIC_NUDGE  # no controller: the generic nudge
    state = ControllerState(run=run.name, workers=[WorkerBook(n=1, agent="scripted"), WorkerBook(n=2, agent="x")])
    state.jobs.append(Job(id="t1", role=Role.FINDER, task="t1", worker=1))
    state.workers[0].job = "t1"
    save_state(run, state)
    own = nudge_message(run, 1)
    assert own != GENERIC_NUDGE and "t1" in own
    assert nudge_message(run, 2) == GENERIC_NUDGE  # a worker with no job

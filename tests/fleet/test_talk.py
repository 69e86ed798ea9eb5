"""Talking to workers on a real tmux server, with orch's own scripted agent in the panes: a multi-line
message as one submission, a brief written and pointed at, an Enter inside a paste window pressed again."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from orch.agents.scripted.adapter import ScriptedAdapter
from orch.fleet import control, talk
from orch.fleet.tmux import TmuxServer
from orch.run import workerprotocol
from orch.run.folder import RunFolder
from orch.waits import wait_until
from tests.fleet.test_tmux import TIMEOUT, events, start_agent, state_file, wait_events
from tests.helpers import orch, prompts


def test_multiline_send_is_one_submission(run3: RunFolder) -> None:
    text = "\n".join(f"line {i}: some text with 'quotes' and $dollars" for i in range(1, 31))
    result = orch("send", "r3", "2", "--file", "-", input=text)
    assert result.exit_code == 0, result.output
    assert prompts(run3, 2) == [text]
    assert prompts(run3, 1) == [] and prompts(run3, 3) == []


def test_send_words_are_joined(run3: RunFolder) -> None:
    assert orch("send", "r3", "1", "hello", "there").exit_code == 0
    assert prompts(run3, 1) == ["hello there"]


def test_brief_writes_task_and_worker_follows_it(run3: RunFolder, tmp_path: Path) -> None:
    brief = tmp_path / "brief.md"
    brief.write_text(
        "Say hello on the bus, write a result, then finish.\n"
        "$ orch bus post r3 --as 1 hello from one\n"
        f"$ echo done > {run3.result(1)}\n"
        f"$ touch {run3.done(1)}\n"
    )
    result = orch("brief", "r3", "1", brief)
    assert result.exit_code == 0, result.output
    task = run3.task(1).read_text()
    assert task.startswith("Say hello") and "Worker protocol" in task and str(run3.done(1)) in task
    assert prompts(run3, 1) == [workerprotocol.pointer_text(run3, 1)]
    assert orch("wait", "r3", "--only", "1", "--timeout", "20").exit_code == 0
    row = control.status(run3).workers[0]
    assert row.done and row.result and row.last_bus is not None and row.last_bus.endswith("[W1] hello from one")


@pytest.fixture
def server() -> Iterator[TmuxServer]:
    srv = TmuxServer(f"orch-test-{uuid.uuid4().hex[:8]}")
    yield srv
    srv.kill()


class WindowAgent(ScriptedAdapter):
    """The scripted agent as an agent with a paste window (Gemini CLI's kind): its empty prompt line is its
    empty draft."""

    FACTS = dataclasses.replace(ScriptedAdapter.FACTS, paste_window=0.05, empty_draft=r"^scripted>\s*$")


@pytest.mark.parametrize("new_lines", [0, 1])
def test_an_enter_taken_as_a_new_line_is_pressed_again_at_once(
    server: TmuxServer, tmp_path: Path, new_lines: int
) -> None:
    """An Enter inside the agent's paste window that became a new line shows in its draft: `_enter_in_window`
    says so at once (no 0.5 s wait), and the next Enter submits the whole draft as one prompt."""
    _, spec = start_agent(server, tmp_path, ORCH_SCRIPTED_NEWLINE_ENTERS=str(new_lines))
    pane, state = server.pane(1), state_file(spec)
    server.paste(pane.pane_id, "hello window")
    wait_until(lambda: "hello window" in server.capture(pane.pane_id), TIMEOUT, "the paste to show")

    def acknowledged() -> bool:
        return bool(events(state, "UserPromptSubmit"))

    started = time.monotonic()
    taken = talk._enter_in_window(WindowAgent(), server, pane, acknowledged, TIMEOUT)
    assert taken is (new_lines == 0)
    if not taken:
        assert time.monotonic() - started < talk.PASTE_RETRY * 4  # seen on screen, not waited out
        assert talk._enter_in_window(WindowAgent(), server, pane, acknowledged, TIMEOUT)
    wait_events(state, "Stop")
    assert [e["prompt"].strip() for e in events(state, "UserPromptSubmit")] == ["hello window"]

"""Talking to workers on a real tmux server, with orch's own scripted agent in the panes: a multi-line
message as one submission, a brief written and pointed at."""

from __future__ import annotations

from pathlib import Path

from orch.fleet import control
from orch.run import workerprotocol
from orch.run.folder import RunFolder
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

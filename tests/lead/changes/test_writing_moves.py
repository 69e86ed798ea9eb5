"""orch/lead/changes/writing.py, a writer moved into its worktree: its agent restarted there with its brief on the
command line, and nothing waits for the new start (real tmux, orch's scripted agent through the run's gateway). A
late hook of its previous life does not end the new one."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from orch.agents.scripted.adapter import BOOT_HOLD
from orch.jobs.changes import ChangeStatus
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.waits import wait_until
from tests.helpers import SAMPLE, diagnose, orch
from tests.lead.leadrun import DONE, RESULT, events, reply, write_spec

NO_FINDINGS = {"write": "{{findings_file}}", "content": '{"job": "{{job}}", "findings": []}\n'}


def _after(go: Path) -> dict[str, str]:
    """A step that waits for the test to create `go`."""
    return {"bash": f"while [ ! -e {go} ]; do sleep 0.05; done"}


def _seen(run: RunFolder, name: Event, **match: Any) -> bool:
    if not run.events.exists():
        return False
    return any(
        e.event == name and all((e.worker if k == "worker" else e.data.get(k)) == v for k, v in match.items())
        for e in events(run)
    )


def test_a_writer_moved_into_its_worktree_holds_up_no_other_worker(tmp_path: Path) -> None:
    """Worker 1 finishes a finder job, then its writer job moves its agent into a fresh worktree, whose start is held
    (the scripted agent's boot hold). Meanwhile worker 2 is let go, works and has its job accepted, and a late
    SessionEnd of worker 1's previous session lands in its hook log: the loop serves worker 2 and takes the moved
    worker for booting, not ended. Released, worker 1 boots, works from its brief and its change lands."""
    name = "moveboot"
    run = RunFolder.for_name(name)
    hold, go1, go2 = run.config_dir(1) / BOOT_HOLD, run.root / "go1", run.root / "go2"
    look: list[dict[str, str]] = [_after(go1), NO_FINDINGS, RESULT, DONE, reply()]
    note: list[dict[str, str]] = [{"write": "{{workdir}}/NOTE.md", "content": "a note\n"}, RESULT, DONE, reply()]
    other: list[dict[str, str]] = [_after(go2), NO_FINDINGS, RESULT, DONE, reply()]
    tasks = [
        {"id": "look", "role": "finder", "goal": "Look.", "worker": 1, "offline_script": look},
        {"id": "w", "role": "writer", "goal": "Add a note.", "worker": 1, "offline_script": note},
        {"id": "other", "role": "finder", "goal": "Look too.", "worker": 2, "offline_script": other},
    ]
    workdir = tmp_path / "work"
    shutil.copytree(SAMPLE, workdir)
    spec = write_spec(
        tmp_path / "spec.yaml",
        workdir,
        tasks,
        agent="scripted",
        workers=2,
        checks=["true"],
        changes={"reviewers_per_change": 0},
        timeouts={"boot": 120, "job": 120, "run": 200},
    )
    held: dict[str, Any] = {}

    def side() -> None:
        try:
            wait_until(lambda: _seen(run, Event.BRIEF_SENT, job="look"), 120, "worker 1's first brief")
            hold.touch()  # its next start (the move) waits
            go1.touch()
            wait_until(lambda: _seen(run, Event.WORKER_MOVED, worker=1), 120, "worker 1 moved into its worktree")
            old = next(e for e in reversed(run.hook_events(1)) if e.session_id).session_id
            late = time.time()
            line = {"ts": late, "hook_event_name": "SessionEnd", "session_id": old, "reason": "other"}
            with run.state(1).open("a") as log:  # its previous life's hook, written late
                log.write(json.dumps(line) + "\n")
            go2.touch()
            wait_until(lambda: _seen(run, Event.JOB_ACCEPTED, job="other"), 60, "worker 2's job, worker 1 held")
            held["booted"] = any(e.hook_event_name == "SessionStart" and e.ts > late for e in run.hook_events(1))
            held["crashed"] = _seen(run, Event.CRASH_SEEN, worker=1) or _seen(run, Event.RESTARTED_WORKER, worker=1)
        except BaseException as exc:
            held["error"] = exc
        finally:
            hold.unlink(missing_ok=True)
            go1.touch()
            go2.touch()

    thread = threading.Thread(target=side, daemon=True)
    thread.start()
    result = orch("run", spec, "--local", "--name", name, "--snapshot")
    thread.join(60)
    assert "error" not in held, held.get("error")
    assert result.exit_code == 0, result.output + diagnose(run)
    assert held == {"booted": False, "crashed": False}  # worker 2 served while worker 1 had not started
    sent = [e for e in events(run, Event.BRIEF_SENT) if e.data.get("job") == "w"]
    assert [e.data.get("on_command_line") for e in sent] == [True]  # its brief on its restart's command line
    rows = {row["task"]: row for row in json.loads(run.report_json.read_text())["changes"]}
    assert rows["w"]["status"] == ChangeStatus.LANDED

"""serve-run's lock: a run another container serves or drives is in use."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orch.container.serverun import compose_request
from orch.run.records import Isolation

pytestmark = pytest.mark.pure  # starts nothing: no process, no engine, no connection


def test_compose_run_in_use_is_seen_through_its_locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another container on the same runs volume serving the run (serve-run's lock) or driving it (the
    controller's lock) is seen as in use; its locks released (its processes gone), the run is free; a link
    planted in a lock's place is not a lock."""
    import fcntl

    from orch.container import compose
    from orch.container.serverun import hold_serve_lock
    from orch.run.folder import RunFolder

    monkeypatch.setattr(compose, "run_mount", lambda name: str(tmp_path / name))
    run = RunFolder(tmp_path / "demo")
    assert not compose.in_use("demo")  # no run at all
    run.root.mkdir()
    held = hold_serve_lock(run)
    assert compose.in_use("demo")
    os.close(held)
    assert not compose.in_use("demo")
    fd = os.open(run.controller_lock, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as orch.lead.controller.controller_lock takes it
    assert compose.in_use("demo")
    os.close(fd)
    run.serve_lock.unlink()
    run.serve_lock.symlink_to(run.controller_lock)
    assert not compose.in_use("demo")


@pytest.mark.parametrize("agent", ["claude", "scripted", "aider"])
def test_compose_fleet_runs_every_agent_that_can_run_strict_strict(agent: str) -> None:
    """aider reaches its own pane through the relay (`own_pane`): it runs strict in compose's `fleet` as under `orch
    up`, not shared (where its watcher would drive the run's tmux server, every pane)."""
    assert compose_request("c", 1, agent, strict=True).isolation is Isolation.STRICT
    assert compose_request("c", 1, agent, strict=False).isolation is Isolation.SHARED

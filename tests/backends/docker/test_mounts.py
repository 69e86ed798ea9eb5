"""A remote engine's run folder copied back (orch.backends.docker.mounts): this side's own lines of events.jsonl
(`orch run`'s run-created line, written here before the controller there started) survive every copy back."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from orch.backends.docker import mounts
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent
from tests.helpers import run_info

pytestmark = pytest.mark.pure  # files only


def _archive(root: Path) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(root, arcname=root.name)
    buf.seek(0)
    return buf


def test_a_copy_back_keeps_the_lines_this_side_wrote(tmp_path: Path) -> None:
    run = RunFolder.for_name("far")
    run.create(run_info("far"))
    there = RunFolder(tmp_path / "there" / "far")
    there.create(run_info("far"))
    there.log_event(ControllerEvent(event=Event.GATEWAY_STARTED))  # the container's, before orch run's line
    run.log_event(ControllerEvent(event=Event.RUN_CREATED))  # this side's, never in the container's copy
    there.log_event(ControllerEvent(event=Event.ASSIGNED, worker=1, data={"job": "t1", "role": "finder"}))
    for _ in range(2):  # once more: a second copy back changes nothing
        mounts._extract_run(_archive(there.root), "far", run)
        said = [ControllerEvent.model_validate_json(line).event for line in run.events.read_text().splitlines()]
        assert said == [Event.GATEWAY_STARTED, Event.RUN_CREATED, Event.ASSIGNED]

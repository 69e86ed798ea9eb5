"""Workers that try to exhaust what the others need, in the container under strict isolation (real Claude
Code, offline): a real fork bomb left running, 3 GiB written into an outbox, a memory hog and a late
writer, beside an honest finder. Before the caps the bomb starved the controller (exit 5, no report) and
the 3 GiB landed on the host's disk. Now each attacker's job fails and is flagged, the honest finding is
confirmed and the run reports."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from orch.run.folder import RunFolder
from orch.run.records import Isolation
from tests import caps_attacks
from tests.dockertest import BUILD_TIMEOUT, new_name
from tests.helpers import SAMPLE, orch
from tests.notify.receiver import Receiver
from tests.scenarios.test_contain_local import LIMITS, assert_contained, assert_told

pytestmark = [pytest.mark.docker, pytest.mark.claude, pytest.mark.timeout(BUILD_TIMEOUT)]


def _size(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def test_attackers_are_stopped_and_the_honest_work_completes_in_the_container(
    image: str, names: list[str], engine: docker.DockerClient, tmp_path: Path, claude_bin: Path, receiver: Receiver
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    for item in SAMPLE.iterdir():
        (workdir / item.name).write_bytes(item.read_bytes())
    name = new_name(names, "contain")
    spec = caps_attacks.spec(tmp_path / "fleet.yaml", workdir, real_bomb=True, limits=LIMITS)
    # The notifier runs here, on the host, reading the run folder the container writes (bind-mounted).
    result = orch("run", str(spec), "--name", name, "--notify", receiver.url())
    run = RunFolder.for_name(name)
    assert run.info().isolation is Isolation.STRICT, result.output
    assert_contained(run, result.output)
    assert result.exit_code == 5, result.output
    assert_told(receiver)
    # The host's disk took none of the 3 GiB: the run folder stays far below its cap.
    assert _size(run.root) < 200 << 20

"""Codex workers in a run's container, offline: they boot with no dialog, post to the bus, write their
result and touch the done flag. Needs a worker image that carries Codex (its `orch.agents` label names
it: `orch image build --agents claude,codex`, set ORCH_IMAGE to it); skipped otherwise."""

from __future__ import annotations

from pathlib import Path

import docker
import docker.errors
import pytest

from orch import settings
from orch.run.events import Event
from orch.run.folder import RunFolder
from tests.dockertest import events, new_name, script_brief
from tests.helpers import orch

pytestmark = [pytest.mark.docker, pytest.mark.codex]


def test_codex_workers_in_a_container(
    engine: docker.DockerClient, names: list[str], workdir: Path, tmp_path: Path
) -> None:
    image = settings.IMAGE.get()  # not the `image` fixture: this test builds nothing
    try:
        carried = (engine.images.get(image).labels or {}).get("orch.agents", "")
    except docker.errors.ImageNotFound:
        pytest.skip(f"no image {image}")
    if "codex" not in carried.split(","):
        pytest.skip(f"{image} does not carry Codex (orch.agents={carried!r}): orch image build --agents claude,codex")
    name = new_name(names)
    result = orch("up", name, "-n", "2", "--workdir", workdir, "--offline", "--egress", "none", "--agent", "codex")
    assert result.exit_code == 0, result.output
    run = RunFolder.for_name(name)
    assert Event.DIALOG_ANSWERED not in [e["event"] for e in events(run)]
    for n in (1, 2):
        brief = tmp_path / f"brief-{n}.md"
        brief.write_text(script_brief(run, n))
        assert orch("brief", name, str(n), brief).exit_code == 0
    waited = orch("wait", name, "--timeout", "120")
    assert waited.exit_code == 0, waited.output
    bus = run.bus.read_text()
    for n in (1, 2):
        assert f"[W{n}] worker {n} checked in" in bus and "all good" in run.result(n).read_text()
    assert orch("kill", name).exit_code == 0

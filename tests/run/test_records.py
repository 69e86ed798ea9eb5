"""run.json: each backend's record by type, and files written by earlier versions still load."""

from __future__ import annotations

import json

import pytest

from orch.errors import UsageError
from orch.run.folder import RunFolder
from orch.run.records import ContainerInfo, DockerRunInfo, LocalRunInfo, RunInfo
from tests.helpers import run_info

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

COMMON = {
    "name": "old",
    "agent": "claude",
    "workers": 2,
    "workdir": "/w",
    "permission_mode": "acceptEdits",
    "tmux_socket": "orch-old",
    "created": "2026-11-01T10:00:00Z",
    "status": "stopped",
    "orch_version": "0.1.0",
}
OLD_CONTAINER = {"name": "orch-old", "image": "orch:1", "remote": True, "host_run_dir": "orch-run-old"}


def _load(data: dict[str, object]) -> RunInfo:
    run = RunFolder.for_name("old")
    run.root.mkdir(parents=True)
    run.run_json.write_text(json.dumps(data))
    return run.info()


def test_an_old_local_run_json_with_a_null_container_loads_as_local() -> None:
    info = _load({**COMMON, "backend": "local", "container": None})
    assert isinstance(info, LocalRunInfo) and info.where == "local"
    assert "container" not in json.loads(info.model_dump_json())


def test_an_old_container_run_json_keeps_its_remote_key() -> None:
    info = _load({**COMMON, "backend": "docker", "container": OLD_CONTAINER})
    assert isinstance(info, DockerRunInfo) and info.container.on_remote_engine
    assert info.where == "container orch-old"
    dumped = json.loads(info.model_dump_json())
    assert dumped["container"]["remote"] is True and "on_remote_engine" not in dumped["container"]
    assert {k: dumped[k] for k in COMMON} == COMMON  # nothing renamed at the top level


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({**COMMON, "backend": "docker"}, "Field required"),  # a container run without its container
        ({**COMMON, "backend": "docker", "container": None}, "Input should be"),
        ({**COMMON, "backend": "local", "container": OLD_CONTAINER}, "Extra inputs"),
        ({**COMMON, "backend": "vm"}, "does not match any of the expected tags"),
        ({"name": "old"}, "Unable to extract tag"),
    ],
    ids=["docker-no-container", "docker-null-container", "local-with-container", "unknown-backend", "no-backend"],
)
def test_a_record_that_mixes_backends_is_malformed(data: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        _load(data)


def test_a_written_record_reads_back_as_its_type() -> None:
    for info in (run_info("a"), run_info("b", container=ContainerInfo(name="orch-b", image="i", host_run_dir="/x"))):
        run = RunFolder.for_name(info.name)
        run.create(info)
        assert run.info() == info and type(run.info()) is type(info)

"""The shared suite every registered backend runs: it keeps the Backend contract, states its facts, makes its
settings and its variant of run.json strictly, and a run.json of it reads back as its variant in a process that
never loaded it. A toy third backend (tests/backends/toy_backend.py) is registered for the whole suite and runs
a fleet from the command line: adding a backend is its package and one registry line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import pytest
from pydantic import BaseModel, ValidationError

from orch.backends import registry as backends
from orch.backends.base import Backend, BackendSettings, ChecksSandbox, UpOptions
from orch.backends.registry import confinement_of
from orch.backends.swarm.record import SwarmInfo
from orch.cli.outputs import LsOutput
from orch.contracts import Sandbox
from orch.errors import SandboxError, UsageError
from orch.fleet import control
from orch.run.folder import RunFolder
from orch.run.records import RUN_RECORDS, ContainerInfo, Isolation, RunInfoBase, RunStatus
from tests.helpers import orch, run_info, stand_in_binaries

TOY = "toy"
NAMES = [*backends.BACKENDS, TOY]
"""Every registered backend, and the toy one the suite registers."""


@pytest.fixture(autouse=True)
def toy_registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Register the toy backend the way orch/backends/registry.py names its own: a module and its class."""
    monkeypatch.setitem(backends.BACKENDS, TOY, "tests.backends.toy_backend:ToyBackend")
    yield
    RUN_RECORDS.pop(TOY, None)  # its variant, added when it loaded: a later test starts without it


def _literal(model: type[BaseModel]) -> object:
    """The one value a model's `backend` field may take."""
    (value,) = get_args(model.model_fields["backend"].annotation)
    return value


@pytest.mark.pure
@pytest.mark.parametrize("name", NAMES)
def test_backend_keeps_the_contract(name: str) -> None:
    backend = backends.get_backend(name)
    assert isinstance(backend, Backend) and backend.name == name
    assert backend.title and backend.about and backend.shared_note()
    assert issubclass(backend.record, RunInfoBase) and _literal(backend.record) == name
    assert backend.record.model_config.get("extra") == "forbid"
    for fact in ("pinned_agents", "checks_at_start", "container", "gateway_keeper", "comes_home", "lingers"):
        assert isinstance(getattr(backend, fact), bool), fact
    assert backend.checks and all(kind in ChecksSandbox for kind in backend.checks)
    assert isinstance(backend.strict_possible(), bool)
    isolation, note = backend.default_isolation(["scripted"])
    assert isolation in Isolation and (note is None or isinstance(note, str))


@pytest.mark.pure
@pytest.mark.parametrize("name", NAMES)
def test_its_settings_are_its_own_and_strict(name: str) -> None:
    """Settings come from the command line's options, name their backend, refuse a key that is not theirs, and
    start its sandbox."""
    backend = backends.get_backend(name)
    settings = backend.settings(UpOptions(boot_timeout=7))
    assert isinstance(settings, BackendSettings) and settings.backend == name == _literal(type(settings))
    assert settings.boot_timeout == 7
    with pytest.raises(ValidationError):
        type(settings).model_validate({**settings.model_dump(), "not_a_setting": 1})
    assert isinstance(backend.sandbox(settings), Sandbox)
    assert isinstance(backends.start_sandbox(backend, settings=settings), Sandbox)


OWN: dict[str, dict[str, object]] = {
    "docker": {"container": ContainerInfo(name="orch-docker", image="i", host_run_dir="/x")},
    "swarm": {"swarm": SwarmInfo(image="i", constraints=["node.role==worker"], drive=True)},
    TOY: {"motto": "hello"},
}
"""The fields of each backend's variant beyond those every run has (a new backend adds its own here)."""


@pytest.mark.pure
@pytest.mark.parametrize("name", NAMES)
def test_its_run_json_reads_back_as_its_variant(name: str) -> None:
    """A run.json names its backend and reads back as that backend's variant; a key of another is refused."""
    record = backends.get_backend(name).record
    info = record.of(run_info(name), **OWN.get(name, {}))
    run = RunFolder.for_name(name)
    run.create(info)
    assert type(run.info()) is record and run.info() == info
    try:  # how its workers are kept apart where its tmux server runs, if that is this process
        confinement = backends.confinement_of(info)
    except SandboxError:
        assert not backends.get_backend(name).folder_is_here(info) or backends.get_backend(name).container
    else:
        assert confinement.name in ("shared", "bubblewrap", "own-uid") and not confinement.own_uids
    stray = "motto" if name != TOY else "egress_allow"
    run.run_json.write_text(json.dumps({**json.loads(run.run_json.read_text()), stray: None}))
    with pytest.raises(UsageError, match="is malformed"):
        run.info()


@pytest.mark.pure
def test_a_variant_of_a_backend_s_own_is_found_by_its_name() -> None:
    """A backend whose package holds its variant: a run.json of it reads in a process that never loaded it
    (the registry loads the backend it names)."""
    run = RunFolder.for_name("toyish")
    run.create(backends.get_backend(TOY).record.of(run_info("toyish"), motto="hi"))
    RUN_RECORDS.pop(TOY)
    assert type(run.info()).__name__ == "ToyRunInfo" and RUN_RECORDS[TOY] is type(run.info())


@pytest.mark.pure
def test_the_registry_names_what_there_is() -> None:
    assert backends.names()[: len(NAMES)] == NAMES
    with pytest.raises(UsageError) as err:
        backends.get_backend("nope")
    assert err.value.message == f"unknown backend 'nope' (available: {', '.join(sorted(NAMES))})"
    assert backends.chosen(None).name == backends.DEFAULT and backends.chosen("toy").name == TOY
    assert backends.chosen(None, local=True).name == "local" == backends.chosen("local", local=True).name
    with pytest.raises(UsageError, match="disagree"):
        backends.chosen("docker", local=True)
    bad = RunFolder.for_name("nowhere")
    bad.create(run_info("nowhere"))
    bad.run_json.write_text(bad.run_json.read_text().replace('"local"', '"nowhere"'))
    with pytest.raises(UsageError, match="does not match any of the expected tags"):
        bad.info()


@pytest.mark.pure
def test_inside_a_run_container_every_fleet_is_local(monkeypatch: pytest.MonkeyPatch) -> None:
    assert backends.here().name == "local" and not backends.here().gateway_keeper
    monkeypatch.setenv("ORCH_IN_CONTAINER", "1")
    assert backends.here().container and backends.here().gateway_keeper
    # Bubblewrap, else the checks' uid; a shared run's, its own uid (orch.lead.changes.uidchecks).
    assert backends.here().checks == (ChecksSandbox.BWRAP, ChecksSandbox.OWN_UID, ChecksSandbox.RUN_UID)
    assert backends.chosen(None).name == "local"


def test_the_toy_backend_runs_a_fleet_from_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`orch up --backend toy` and `orch doctor`: the CLI takes a backend by name, and what the toy says of
    itself reaches the user; its run's record is its own variant, and the fleet commands work on it."""
    stand_in_binaries(monkeypatch)  # the agents' own doctor lines are not this test's
    doctor = orch("doctor")
    assert "backend        toy: a toy: tmux on this machine" in doctor.output
    assert "ok toy            nothing to install" in doctor.output
    up = orch("up", "toyrun", "--backend", "toy", "-n", "2", "--agent", "scripted", "--offline", "--workdir", tmp_path)
    assert up.exit_code == 0, up.output
    assert "a toy's workers share your uid: it offers no strict isolation" in up.output
    run = RunFolder.for_name("toyrun")
    try:
        info = run.info()
        assert type(info).__name__ == "ToyRunInfo" and json.loads(run.run_json.read_text())["motto"] == "hello"
        assert info.status is RunStatus.RUNNING and info.isolation is Isolation.SHARED
        (row,) = LsOutput.model_validate_json(orch("ls", "--json").output).runs
        assert (row.name, row.backend, row.status, row.container) == ("toyrun", "toy", RunStatus.RUNNING, None)
        strict = orch("up", "toy2", "--backend", "toy", "--agent", "scripted", "--isolation", "strict")
        assert strict.exit_code == 2 and "the toy backend offers no strict isolation" in strict.output
    finally:
        control.kill(run, confinement_of(info))
    assert run.info().status is RunStatus.STOPPED
    unknown = orch("up", "x", "--backend", "nope", "--agent", "scripted")
    assert unknown.exit_code == 2 and "unknown backend 'nope' (available: " in unknown.output

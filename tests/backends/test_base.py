"""The backend contract's own parts (orch/backends/base.py): the command line's options, the defaults a backend
inherits (the local machine's), the isolation `orch up` picks, and where checks may run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from orch.backends import registry as backends
from orch.backends.base import Backend, BackendSettings, ChecksSandbox, UpOptions, in_container
from orch.errors import SandboxError
from orch.run.records import EgressMode, Isolation
from tests.helpers import run_info

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network


@pytest.fixture
def toy() -> Iterator[Backend]:
    backends.BACKENDS["toy"] = "tests.backends.toy_backend:ToyBackend"
    yield backends.get_backend("toy")
    del backends.BACKENDS["toy"]


def test_the_options_leave_each_choice_to_the_backend() -> None:
    options = UpOptions()
    assert options.boot_timeout is None and options.egress is None and not options.copy and options.image is None
    assert BackendSettings(backend="x").boot_timeout is None  # the fleet's own default (orch.fleet.launch)
    assert UpOptions(egress=EgressMode.NONE, allow=("a.example",)).allow == ("a.example",)


def test_a_backend_inherits_the_local_machine_s_answers(toy: Backend) -> None:
    """What the toy does not say of itself is the base's: checks in bubblewrap, first, in the starting process;
    the folder here; the gateway kept by the controller; ready at once."""
    assert type(toy).checks is Backend.checks == (ChecksSandbox.BWRAP,)
    assert toy.checks_at_start and not toy.pinned_agents and not toy.container and not toy.gateway_keeper
    assert toy.folder_is_here(run_info("t")) and toy.ready(["claude"]) is None
    with pytest.raises(SandboxError, match="does not run in this process"):
        Backend.confinement(toy, run_info("t"))  # the base's: a backend whose fleet runs here says how it confines


def test_strict_unless_an_agent_cannot(toy: Backend) -> None:
    local = backends.get_backend("local")
    assert Backend.default_isolation(local, ["claude", "codex"]) == (Isolation.STRICT, None)
    assert toy.default_isolation(["claude"])[0] is Isolation.SHARED  # the toy's own answer


def test_in_a_container_is_the_backends_own_question(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_IN_CONTAINER", "")
    assert not in_container()
    monkeypatch.setenv("ORCH_IN_CONTAINER", "1")
    assert in_container() and backends.here().name == "docker"

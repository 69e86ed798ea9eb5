"""Which confinement a run whose tmux server is here gets (orch/backends/local/confinement.py), and what each of
strict isolation's says of itself: a bubblewrap sandbox per worker on a host, a uid per worker in a container.
Their panes, processes and relay run in tests/backends/local/test_bwrap.py, the container tests and the relay's."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from orch.agents.registry import get_adapter
from orch.backends.local import bwrap, relay
from orch.backends.local.confinement import Bubblewrap, ByUid, OwnUid, choose
from orch.backends.registry import confinement_of, get_backend
from orch.contracts import WorkerContext
from orch.errors import SandboxError, UsageError
from orch.fleet.confinement import Shared
from orch.fleet.supervisor import SUPERVISOR
from orch.run.folder import RunFolder
from orch.run.paths import launch_dir
from orch.run.records import ContainerInfo, Isolation
from orch.run.uids import worker_uid
from tests.helpers import run_info

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

STRICT = run_info("s", workers=2).model_copy(update={"isolation": Isolation.STRICT})
SHARED = run_info("s", workers=2)
BOXED = run_info("d", container=ContainerInfo(name="orch-d", image="i", host_run_dir="/x"))


def test_each_run_gets_its_confinement_from_its_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    assert choose(STRICT) == Bubblewrap() and choose(SHARED) == Shared(boxed=False)
    with pytest.raises(SandboxError, match="does not run in this process"):
        confinement_of(BOXED)  # a container run's fleet is in its container, not here
    monkeypatch.setenv("ORCH_IN_CONTAINER", "1")  # in a run's container: a uid each, and even shared is boxed
    assert choose(STRICT) == OwnUid() and choose(SHARED) == Shared(boxed=True)
    assert confinement_of(BOXED) == Shared(boxed=True) == get_backend("local").confinement(SHARED)


def test_what_each_says_of_itself() -> None:
    sandboxed, own = Bubblewrap(), OwnUid()
    assert (sandboxed.name, sandboxed.own_uids, sandboxed.boxed) == ("bubblewrap", False, True)
    assert (own.name, own.own_uids, own.boxed) == ("own-uid", True, True)
    assert sandboxed.needs_relay(SHARED) and sandboxed.scratch() == []
    assert not own.needs_relay(SHARED)  # its workers need the relay only for an agent that types into its pane
    aider = SHARED.model_copy(update={"worker_agents": {2: "aider"}})
    assert own.needs_relay(aider) and Path("/tmp") in own.scratch()
    run = RunFolder.for_name("s")
    aider_adapter, claude = get_adapter("aider"), get_adapter("claude")
    assert sandboxed.pane_socket(run, aider_adapter, 2) == bwrap.PANE_SOCKET
    assert own.pane_socket(run, aider_adapter, 2) == relay.own_pane_socket(run, 2)
    assert sandboxed.pane_socket(run, claude, 1) is own.pane_socket(run, claude, 1) is None
    assert own.agent_tree(7) == (7, set())


def test_a_process_is_the_worker_s_whose_uid_it_runs_as() -> None:
    mine = ByUid(frozenset({1, 2}))
    assert mine.owner(os.getpid()) is None  # this process's uid is no worker's
    assert ByUid(frozenset()).owner(os.getpid()) is None


def test_a_worker_of_its_own_uid_starts_from_a_bundle_only_the_controller_reads(tmp_path: Path) -> None:
    run = RunFolder.for_name("s")
    run.create(STRICT.model_copy(update={"workdir": str(tmp_path)}))
    ctx = WorkerContext(run, 2, 2, tmp_path, run.config_dir(2), "default", boxed=True)
    spec = OwnUid().pane(run, run.info(), get_adapter("scripted"), ctx, {"TOKEN_VAR": "t0k3n"})
    bundle = Path(spec.argv[4])
    assert bundle.parent == launch_dir() and bundle.stat().st_mode & 0o777 == 0o600
    assert json.loads(bundle.read_text())["env"] == {"TOKEN_VAR": "t0k3n"} and json.loads(bundle.read_text())["boxed"]
    assert "t0k3n" not in " ".join(spec.argv) and "t0k3n" not in json.dumps(spec.env)
    setpriv = spec.argv.index("setpriv")
    assert f"--reuid={worker_uid(2)}" in spec.argv[setpriv:] and SUPERVISOR in spec.argv
    assert "nice" in spec.argv  # its caps are its uid's alone, and it is niced in the container
    with pytest.raises(UsageError, match="login file"):
        OwnUid().pane(run, run.info(), get_adapter("claude"), dataclasses.replace(ctx, login_file=tmp_path), {})

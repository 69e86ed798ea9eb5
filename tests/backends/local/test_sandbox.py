"""The local sandbox (orch/backends/local/sandbox.py): a strict run's egress refused where it would promise
nothing, what `check` refuses before anything is made, its boot timeout, and commands run in this process."""

from __future__ import annotations

from pathlib import Path

import pytest

from orch.backends.local.backend import LocalSettings
from orch.backends.local.sandbox import LocalSandbox
from orch.contracts import OrchCommand, UpRequest
from orch.errors import UsageError
from orch.fleet.booting import BOOT_TIMEOUT
from orch.run.folder import RunFolder
from orch.run.records import Isolation
from tests.helpers import run_info


def _request(tmp_path: Path, isolation: Isolation = Isolation.STRICT) -> UpRequest:
    return UpRequest(name="l", workers=1, agent="scripted", workdir=tmp_path, isolation=isolation)


@pytest.mark.pure  # starts nothing: refused before the plan
def test_an_allowlist_only_for_strict_workers_on_a_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    box = LocalSandbox(LocalSettings(egress_allow=["pypi.org:443"]))
    with pytest.raises(UsageError, match="--egress allowlist applies to a strict local run"):
        box.check(_request(tmp_path, Isolation.SHARED))  # a shared worker reaches what this machine does
    monkeypatch.setenv("ORCH_IN_CONTAINER", "1")  # a container's egress is its firewall's
    with pytest.raises(UsageError, match="--egress allowlist applies to a strict local run"):
        box.up(_request(tmp_path))


def test_check_refuses_a_run_that_exists(tmp_path: Path) -> None:
    RunFolder.for_name("l").create(run_info("l", workdir=str(tmp_path)))
    request = _request(tmp_path, Isolation.SHARED)
    with pytest.raises(UsageError, match="already exists"):
        LocalSandbox().check(request)


def test_its_boot_timeout_and_commands_here() -> None:
    assert LocalSandbox().boot_timeout == BOOT_TIMEOUT
    assert LocalSandbox(LocalSettings(boot_timeout=0)).boot_timeout == 0  # no wait at all, not the default
    done: list[str] = []
    box, info = LocalSandbox(), run_info("l")
    assert box.forward(info, OrchCommand(["bus", "post", "l", "x"], lambda: done.append("here"))) == 0
    assert done == ["here"] and box.pull(info) is False and box.state(info) == "-"
    assert box.screens(info, [1], 10) == {}  # no tmux server: no pane to show

"""Shared fixtures: every test gets its own ORCH_HOME and its own tmux socket directory."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from orch.gateway.process import stop_gateway
from orch.run.folder import RunFolder
from orch.run.paths import sockets_dir
from tests.helpers import pinned_bin
from tests.notify.receiver import Receiver, serve

# The docker tests' fixtures (engine, image, names, workdir) live in tests/dockertest.py, the swarm tests'
# (cluster, manager) in tests/swarmtest.py.
pytest_plugins = ["tests.dockertest", "tests.swarmtest"]

# Speed is measured in bench/, never asserted in a test: hypothesis's per-example deadline and its too-slow health
# check are timings, and on a loaded machine they failed property tests that were right (test_escape's markdown).
settings.register_profile("orch", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("orch")

SLOW_TIERS = ("docker", "swarm", "claude", "codex", "gemini", "opencode", "aider")
"""Markers of the tiers that need a real agent binary or a Docker engine; every other test is `fast`."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if not any(item.get_closest_marker(name) for name in SLOW_TIERS):
            item.add_marker(pytest.mark.fast)


@pytest.fixture(autouse=True)
def pure_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test marked `pure` starts nothing: a process or a network connection it tries fails the test."""
    if request.node.get_closest_marker("pure") is None:
        return

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a `pure` test started a process or opened a connection: drop the marker")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(os, "fork", refuse)


@pytest.fixture(autouse=True)
def orch_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "orch-home"
    monkeypatch.setenv("ORCH_HOME", str(home))
    # The user's notification defaults (~/.config/orch/config.toml) and desktop never reach a test's runs.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    yield home
    # A run's gateway is a detached process (it outlives `orch up` by design): stop the test's ones.
    for handle in (home / "gateways").glob("*.json"):
        stop_gateway(handle)
    stop_notifiers(home)
    stop_relays(home)


def stop_relays(home: Path) -> None:
    """A local strict run's relay stops by itself once it sees its fleet's tmux server gone, but a test's fleet can
    come and go between two of its looks, and tmux_tmpdir removes the socket it looks at: then it waits out its
    start grace (150 s). A test that leaves its run up has its relay (and the workers' sockets) stopped here."""
    runs = [RunFolder(root) for root in (home / "runs").glob("*") if sockets_dir(root).exists()]
    if runs:
        from orch.backends.local import relay  # here: asyncio and the rest, for the tests that leave a relay

        for run in runs:
            relay.stop(run)


def stop_notifiers(home: Path) -> None:
    """An `orch up` run's notifier ends with its run; one whose run the test left running is stopped here."""
    locks = list((home / "runs").glob("*/.notify.lock"))
    if locks:
        from orch.cli.notify import stop_detached  # here: the CLI's imports are for the tests that need them

        for lock in locks:
            stop_detached(RunFolder(lock.parent))


@pytest.fixture(autouse=True)
def tmux_tmpdir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private TMUX_TMPDIR per test (short: socket paths are limited to ~100 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="ot-", dir="/tmp"))
    monkeypatch.setenv("TMUX_TMPDIR", str(path))
    monkeypatch.setenv("SHELL", "/bin/sh")
    yield path
    for sock_dir in path.glob("tmux-*"):
        for sock in sock_dir.iterdir():
            subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True, check=False)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def claude_bin() -> Path:
    return pinned_bin("claude")


@pytest.fixture(scope="session")
def codex_bin() -> Path:
    return pinned_bin("codex")


@pytest.fixture(scope="session")
def gemini_bin() -> Path:
    return pinned_bin("gemini")


@pytest.fixture
def spec_dir(tmp_path: Path) -> Path:
    """A folder for a fleet spec, with the `src/` its workdir names (tests/spec, tests/jobs, tests/report)."""
    (tmp_path / "src").mkdir()
    return tmp_path


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A webhook receiver on loopback (tests/notify/receiver.py)."""
    yield from serve()

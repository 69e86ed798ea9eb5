"""`orch setup`'s installs (orch.agents.installs) with the real npm on local packages (no registry): into orch's
agent cache, an agent there left alone, a failed install leaving nothing, a chosen binary respected, and the
size on disk as du counts it. A venv's install (aider) is made by every scripts/test.sh (`orch setup --agents
all`): a venv here would cost half a minute of the fast tier."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest

from orch.agents import installs
from orch.errors import OrchError
from orch.run.paths import agent_cache

TOY = installs.Install(
    agent="toy", title="Toy agent", version="1.2.3", pip=False, prefix=Path("/nonexistent"), spec="",
    command="toy", config_npm=None, size_mb=1,
)  # fmt: skip


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return agent_cache()


def toy_package(tmp_path: Path) -> Path:
    """A local npm package with a `toy` command, packed as npm would fetch it."""
    pkg = tmp_path / "pkg"
    (pkg / "bin").mkdir(parents=True)
    (pkg / "package.json").write_text(json.dumps({"name": "toy-agent", "version": "1.2.3", "bin": {"toy": "bin/toy"}}))
    (pkg / "bin" / "toy").write_text("#!/bin/sh\necho toy 1.2.3\n")
    done = subprocess.run(
        ["npm", "pack", str(pkg), "--silent"], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert done.returncode == 0, done.stderr
    return tmp_path / done.stdout.strip().splitlines()[-1]


def test_the_cache_follows_xdg_cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert agent_cache() == tmp_path / "orch"
    assert installs.plan(["claude"])[0].prefix.is_relative_to(tmp_path / "orch")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # ignored, as the XDG spec says
    assert agent_cache() == Path.home() / ".cache" / "orch"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert agent_cache() == Path.home() / ".cache" / "orch"


def test_an_npm_agent_is_installed_into_its_prefix_and_then_left_alone(cache: Path, tmp_path: Path) -> None:
    item = dataclasses.replace(TOY, prefix=cache / "toy" / "1.2.3", spec=str(toy_package(tmp_path)))
    assert not item.installed()
    ticks: list[int] = []
    installs.install(item, lambda: ticks.append(1))
    assert item.installed() and subprocess.run([item.binary], capture_output=True, text=True).stdout == "toy 1.2.3\n"
    assert installs.size_mb(item.prefix) >= 0


def test_a_failed_install_leaves_nothing_and_says_the_installers_last_words(cache: Path) -> None:
    item = dataclasses.replace(TOY, prefix=cache / "toy" / "1.2.3", spec=str(cache / "no-such-package.tgz"))
    with pytest.raises(OrchError) as caught:
        installs.install(item)
    assert "npm install" in caught.value.message and "failed" in caught.value.message
    assert "\n" not in caught.value.one_line()
    assert not item.prefix.exists()  # the next `orch setup` starts it afresh


def test_a_binary_the_user_chose_is_not_installed_over(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    monkeypatch.setenv("ORCH_CODEX_BIN", "/bin/true")
    (codex,) = installs.plan(["codex"])
    assert codex.installed() and codex.binary == Path("/bin/true")


def test_size_counts_a_hard_linked_file_once(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(os.urandom(3 << 20))
    os.link(tmp_path / "a", tmp_path / "b")
    assert installs.size_mb(tmp_path) == 3

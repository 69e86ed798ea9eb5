"""`orch setup`: what this machine lacks is said before anything is downloaded, every line of it, and nothing
is installed; an agent with nothing to install says so (tests/agents/test_installs.py: the installs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import orch


def test_what_the_machine_lacks_is_said_first_and_nothing_is_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("ORCH_BWRAP", str(tmp_path / "no-bwrap"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no tmux, git or npm either
    result = orch("setup", "--agents", "claude")
    assert result.exit_code == 2
    lines = result.output.splitlines()
    assert all(line.startswith("orch: error:") and "(hint: " in line for line in lines), lines
    said = " ".join(lines)
    assert all(word in said for word in ("tmux", "bubblewrap", "git", "npm")), said
    assert not (tmp_path / "xdg").exists()


def test_an_agent_with_nothing_to_install() -> None:
    result = orch("setup", "--agents", "scripted")
    assert result.exit_code == 0 and result.output == "setup: nothing to install for scripted\n"

"""Bad input: one clear line, exit code 2, and nothing half-created."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from orch.fleet.tmux import TmuxServer
from orch.gateway.process import stop_gateway
from orch.run.paths import agents_dir, runs_dir
from tests.helpers import orch


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


def _nothing_left(name: str) -> None:
    assert not (runs_dir() / name).exists(), "half-written run folder left behind"
    assert not (agents_dir() / name).exists(), "config dirs left behind"
    assert not TmuxServer(f"orch-{name}").alive(), "tmux server left behind"


@pytest.mark.parametrize(
    ("name", "extra", "message"),
    [
        ("../x", [], "invalid run name"),
        ("has space", [], "invalid run name"),
        ("semi;colon", [], "invalid run name"),
        ("$(reboot)", [], "invalid run name"),
        ("x" * 65, [], "invalid run name"),
        ("ok", ["-n", "0"], "out of range"),
        ("ok", ["-n", "65"], "out of range"),
        ("ok", ["--agent", "nope"], "unknown agent 'nope' (available: "),
        ("ok", ["--permission-mode", "yolo"], "unknown permission mode"),
        ("ok", ["--egress", "open"], "--egress open is not offered locally"),
        ("ok", ["--allow", "example.com"], "--allow needs --egress allowlist locally"),
        ("ok", ["--egress", "allowlist", "--allow", "10.0.0.1"], "locally --allow takes host names"),
        ("ok", ["--egress", "allowlist", "--allow", "pypi.org:x"], "not a port"),
        ("ok", ["--egress", "allowlist", "--isolation", "shared"], "applies to a strict local run"),
        ("ok", ["--constraint", "node.role==worker"], "place a run on a swarm's nodes; the local backend has none"),
    ],
    ids=[
        "dotdot",
        "space",
        "semicolon",
        "subshell",
        "too-long",
        "zero-workers",
        "too-many",
        "agent",
        "mode",
        "local-egress-open",
        "local-allow-without-allowlist",
        "local-allow-ip",
        "local-allow-bad-port",
        "local-allowlist-shared",
        "local-placement",
    ],
)
def test_up_rejects_bad_arguments(workdir: Path, name: str, extra: list[str], message: str) -> None:
    result = orch("up", name, "--agent", "scripted", "--workdir", workdir, "--local", *extra)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not runs_dir().exists() or not any(runs_dir().iterdir())


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["up", "ok", "--constraint", "zone=eu"], "--constraint 'zone=eu': expected KEY==VALUE or KEY!=VALUE"),
        (["run", "fleet.yaml", "--per-node", "0"], "--per-node 0: give at least 1"),
        (["up", "ok", "--network", "bridge"], "--network bridge: a swarm run's task joins an overlay network"),
        (["run", "placed.yaml", "--per-node", "0"], "--per-node 0: give at least 1"),  # the flag wins, checked too
    ],
    ids=["up-constraint", "run-per-node", "up-node-network", "run-per-node-over-spec"],
)
def test_swarm_placement_is_checked_before_the_manager_is_asked(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], message: str
) -> None:
    monkeypatch.chdir(workdir)
    (workdir / "fleet.yaml").write_text(SPEC)
    (workdir / "placed.yaml").write_text(SPEC + "placement:\n  per_node: 2\n")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{workdir}/no-engine.sock")  # asked, it would fail otherwise
    result = orch(*command, "--backend", "swarm")
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    assert not runs_dir().exists() or not any(runs_dir().iterdir())


SPEC = "workers: 3\nagent: scripted\noffline: true\ntasks:\n  - goal: look\n"


@pytest.mark.parametrize(
    ("command", "title"),
    [
        (["run", "placed.yaml"], "the container backend"),
        (["run", "placed.yaml", "--local"], "the local backend"),
        (["spec", "check", "placed.yaml", "--backend", "docker"], "the container backend"),
    ],
    ids=["run", "run-local", "spec-check"],
)
def test_a_spec_placed_on_a_swarm_is_refused_elsewhere_at_its_line(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], title: str
) -> None:
    monkeypatch.chdir(workdir)
    (workdir / "placed.yaml").write_text(SPEC + "placement:\n  constraints: [node.labels.zone==eu]\n")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{workdir}/no-engine.sock")  # refused before an engine is asked
    result = orch(*command)
    assert result.exit_code == 2, result.output
    said = f"placed.yaml: placement.constraints: places a run on a swarm's nodes; {title} has none to choose"
    assert said in result.output
    assert "(line 7)" in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not runs_dir().exists() or not any(runs_dir().iterdir())


def test_up_missing_workdir(tmp_path: Path) -> None:
    result = orch("up", "ok", "--agent", "scripted", "--workdir", tmp_path / "nope", "--local")
    assert result.exit_code == 2 and "workdir does not exist" in result.output
    _nothing_left("ok")


def test_agent_cli_not_installed(workdir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ORCH_CLAUDE_BIN", str(tmp_path / "no-claude"))
    result = orch("up", "ok", "--workdir", workdir, "--local")
    assert result.exit_code == 2 and "Claude Code is not installed" in result.output
    assert "orch setup --agents claude (or set ORCH_CLAUDE_BIN)" in result.output
    _nothing_left("ok")


def test_gemini_cli_not_installed(workdir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ORCH_GEMINI_BIN", str(tmp_path / "no-gemini"))
    result = orch("up", "ok", "--agent", "gemini", "--workdir", workdir, "--local")
    assert result.exit_code == 2 and "Gemini CLI is not installed" in result.output
    assert "orch setup --agents gemini" in result.output
    _nothing_left("ok")


def test_gemini_up_rejects_a_claude_permission_mode(workdir: Path) -> None:
    # (An image without Gemini CLI: tests/backends/docker/test_image.py, test_up_refuses_a_fleet_its_image_cannot_run.)
    result = orch("up", "ok", "--agent", "gemini", "--workdir", workdir, "--local", "--permission-mode", "acceptEdits")
    message = "unknown permission mode 'acceptEdits' for agent gemini"
    assert result.exit_code == 2 and message in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1
    _nothing_left("ok")


def test_tmux_missing(workdir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no tmux here
    result = orch("up", "ok", "--agent", "scripted", "--workdir", workdir, "--local")
    assert result.exit_code == 2 and "tmux" in result.output
    _nothing_left("ok")


def test_failed_boot_leaves_nothing_behind(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An "agent" that exits at once: up must fail cleanly, not leave a server or folder.
    monkeypatch.setenv("ORCH_CLAUDE_BIN", "/bin/false")
    result = orch("up", "dies", "-n", "2", "--workdir", workdir, "--local", "--boot-timeout", "20")
    assert result.exit_code == 1 and "exited while booting" in result.output
    _nothing_left("dies")


@pytest.fixture(scope="module")
def live_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One fleet for every case below: each is refused before it changes anything, so they share it (a fleet
    per case was most of this file's time). Its own ORCH_HOME and tmux dir, set for each case by `live`."""
    root = tmp_path_factory.mktemp("live")
    world = {"ORCH_HOME": str(root / "orch-home"), "TMUX_TMPDIR": tempfile.mkdtemp(prefix="ot-", dir="/tmp")}
    (root / "work").mkdir()
    with pytest.MonkeyPatch.context() as env:
        for name, value in world.items():
            env.setenv(name, value)
        up = orch("up", "live", "-n", "2", "--agent", "scripted", "--workdir", root / "work", "--local")
        assert up.exit_code == 0, up.output
        try:
            yield world
        finally:
            orch("kill", "live")
            for handle in (Path(world["ORCH_HOME"]) / "gateways").glob("*.json"):
                stop_gateway(handle)
            shutil.rmtree(world["TMUX_TMPDIR"], ignore_errors=True)


@pytest.fixture
def live(live_world: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> str:
    for name, value in live_world.items():
        monkeypatch.setenv(name, value)
    return "live"


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["send", "live", "3", "hi"], None, "out of range"),
        (["send", "live", "0", "hi"], None, "out of range"),
        (["send", "live", "1", "   "], None, "empty message"),
        (["send", "live", "1", "--file", "-"], b"", "empty message"),
        (["send", "live", "1", "--file", "-"], b"\xff\xfe bad", "not UTF-8"),
        (["send", "live", "1", "--file", "-"], b"bin\x00ary", "binary"),
        (["send", "live", "1", "--file", "/nonexistent/brief.md"], None, "file not found"),
        (["send", "live", "1"], None, "no message: give it as TEXT, or with --file"),
        (["brief", "live", "1", "/nonexistent/brief.md"], None, "file not found"),
        (["brief", "live", "1", "-"], b"\n\n", "empty brief"),
        (["read", "live", "7"], None, "out of range"),
        (["send", "ghost", "1", "hi"], None, "no run named 'ghost'"),
        (["status", "ghost"], None, "no run named 'ghost'"),
        (["wait", "live", "--only", "1,x"], None, "bad worker list"),
        (["kill"], None, "give a run name or --all"),
    ],
    ids=[
        "worker-too-high",
        "worker-zero",
        "blank",
        "empty-stdin",
        "non-utf8",
        "binary",
        "missing-file",
        "no-text",
        "brief-missing",
        "brief-empty",
        "read-range",
        "no-run",
        "status-no-run",
        "bad-list",
        "kill-nothing",
    ],
)
def test_fleet_commands_reject_bad_input(live: str, args: list[str], stdin: bytes | None, message: str) -> None:
    result = orch(*args, input=stdin)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert result.output.count("\n") == 1

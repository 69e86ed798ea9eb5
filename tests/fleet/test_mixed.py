"""Mixed fleets: workers of different agent kinds in one run (`orch up --agents claude:1,scripted:2`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orch.cli.common import parse_agents
from orch.contracts import UpRequest
from orch.errors import NotFoundError, UsageError
from orch.fleet import launch, rungateway
from orch.run.folder import RunFolder
from tests.helpers import orch


def test_agents_option_parses_kinds_in_order() -> None:
    assert parse_agents("claude:2,scripted:1") == {1: "claude", 2: "claude", 3: "scripted"}
    assert parse_agents("scripted") == {1: "scripted"}


BAD = {
    "zero": ("scripted:0", "--agents: bad entry 'scripted:0'"),
    "not-a-number": ("scripted:x", "--agents: bad entry 'scripted:x'"),
    "empty": (",", "--agents: bad entry ''"),
    "unknown-kind": ("nope:1", "nope"),
}


@pytest.mark.parametrize(("text", "message"), BAD.values(), ids=BAD.keys())
def test_bad_agents_is_one_line_and_creates_nothing(text: str, message: str, tmp_path: Path) -> None:
    result = orch("up", "bad", "--local", "--agents", text, "--workdir", tmp_path)
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    assert not RunFolder.for_name("bad").root.exists()
    with pytest.raises((UsageError, NotFoundError)):
        parse_agents(text)


@pytest.mark.claude
def test_a_mixed_fleet_runs_each_worker_as_its_own_kind(
    tmp_path: Path, claude_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCH_CLAUDE_BIN", str(claude_bin))
    result = orch("up", "mix", "--local", "--offline", "--agents", "claude:1,scripted:2", "--workdir", tmp_path)
    assert result.exit_code == 0, result.output
    assert "1 claude + 2 scripted worker(s) up" in result.output
    run = RunFolder.for_name("mix")
    info = run.info()
    assert info.agent == "claude" and info.worker_agents == {2: "scripted", 3: "scripted"}
    assert [info.agent_of(n) for n in (1, 2, 3)] == ["claude", "scripted", "scripted"]
    # Each pane runs its own agent, and only the Claude Code worker has a Claude config dir seeded.
    panes = launch.server_for(info).panes()
    commands = {}
    for n in (1, 2, 3):
        pid = launch.agent_pid(panes[n])
        assert pid is not None
        commands[n] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    assert "claude" in commands[1] and "orch.agents.scripted.tui" not in commands[1]
    assert all("orch.agents.scripted.tui" in commands[n] for n in (2, 3))
    assert (run.config_dir(1) / "settings.json").exists() and not (run.config_dir(2) / "settings.json").exists()
    status = orch("status", "mix").output
    assert "claude+scripted" in status and "1 claude" in status and "2 scripted" in status
    assert orch("kill", "mix").exit_code == 0


@pytest.mark.parametrize("command", ["up", "run"])
def test_a_live_fleet_across_model_apis_without_one_credential_is_refused_up_front(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("OPENAI_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-shown")
    if command == "up":
        result = orch("up", "mx", "--local", "--agents", "claude:1,codex:1", "--workdir", tmp_path)
    else:
        spec = tmp_path / "fleet.yaml"
        spec.write_text(
            f"workdir: {tmp_path}\nagents:\n  - {{agent: claude, workers: 1}}\n  - {{agent: codex, workers: 1}}\n"
            "tasks:\n  - goal: Determine whether it works.\n"
        )
        result = orch("run", spec, "--local", "--name", "mx")
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and "codex: OPENAI_API_KEY" in result.output
    assert "sk-ant-test-not-shown" not in result.output
    assert not RunFolder.for_name("mx").root.exists()
    # Offline, the same fleet needs no credential at all (checked as far as the plan, which touches nothing).
    request = UpRequest("mx", 2, "claude", tmp_path, worker_agents={2: "codex"}, offline=True)
    _, info = launch.plan(request)
    assert [u.kind for u in rungateway.upstreams(info).upstreams] == ["scripted"]

"""The Codex adapter's seeding, without running Codex: what CODEX_HOME holds and what the launch asks
for, for each mode; a worker's edits to its own config do not survive a relaunch."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from orch.agents.codex.adapter import BOOT_PROMPT, READY, RESUME_PROMPT, CodexAdapter
from orch.contracts import WorkerContext
from orch.errors import UsageError
from orch.run.folder import RunFolder
from tests.helpers import run_info

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

GATEWAY_URL = "http://127.0.0.1:4242/t/orch-cx-w1-token"


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunFolder:
    monkeypatch.setenv("ORCH_CODEX_BIN", "/bin/true")  # its path only: nothing is run
    folder = RunFolder.for_name("cx")
    folder.create(run_info("cx", workdir=str(tmp_path)))
    return folder


def _prepare(run: RunFolder, mode: str = "workspace-write", **extra: object) -> tuple[list[str], Path]:
    ctx = WorkerContext(
        run=run,
        worker=1,
        workers=1,
        workdir=Path(run.info().workdir),
        config_dir=run.config_dir(1),
        permission_mode=mode,
        env={"OPENAI_BASE_URL": GATEWAY_URL, "OPENAI_API_KEY": "orch-cx-w1-token"},
        **extra,  # type: ignore[arg-type]
    )
    spec = CodexAdapter().prepare(ctx)
    assert spec.env["CODEX_HOME"] == str(run.config_dir(1))
    # `sh -c 'WATCHER & exec "$@"' codex CODEX ARGS...`: the failed-turn watcher beside Codex.
    assert spec.argv[:2] == ["sh", "-c"] and "codex/watch.py" in spec.argv[2] and spec.argv[3] == "codex"
    return spec.argv[4:], run.config_dir(1)


def test_seeded_home_points_at_the_gateway_and_trusts_no_folder(run: RunFolder) -> None:
    argv, home = _prepare(run)
    config = tomllib.loads((home / "config.toml").read_text())
    provider = config["model_providers"][config["model_provider"]]
    assert provider["base_url"] == GATEWAY_URL and provider["env_key"] == "OPENAI_API_KEY"
    assert provider["wire_api"] == "responses"
    assert (config["approval_policy"], config["sandbox_mode"]) == ("never", "workspace-write")
    assert config["sandbox_workspace_write"]["writable_roots"] == [str(run.root)]
    # The workdir restricted: no config, hooks, exec policy or MCP server of its own (Codex's only switch for it).
    assert config["projects"] == {run.info().workdir: {"trust_level": "untrusted"}}
    assert "orch-cx-w1-token" not in json.dumps({k: v for k, v in config.items() if k != "model_providers"})
    hooks = json.loads((home / "hooks.json").read_text())["hooks"]
    assert set(hooks) == {"SessionStart", "UserPromptSubmit", "PreToolUse", "PermissionRequest", "PostToolUse",
                          "Stop", "SessionEnd"}  # fmt: skip
    assert str(run.permission_policy) in hooks["PermissionRequest"][0]["hooks"][0]["command"]
    assert str(home / READY) in hooks["Stop"][0]["hooks"][0]["command"]  # no first prompt: ready after the boot turn
    assert str(home / READY) not in hooks["SessionStart"][0]["hooks"][0]["command"]
    assert argv[-1] == BOOT_PROMPT and "--dangerously-bypass-hook-trust" in argv and "resume" not in argv


def test_a_first_prompt_is_ready_at_session_start(run: RunFolder) -> None:
    argv, home = _prepare(run, prompt="Read /r/brief.md")
    hooks = json.loads((home / "hooks.json").read_text())["hooks"]
    assert str(home / READY) in hooks["SessionStart"][0]["hooks"][0]["command"]
    assert argv[-1] == "Read /r/brief.md"


def test_resume_only_what_codex_kept(run: RunFolder) -> None:
    session = "01a2421a-4d5c-7991-be12-fbb79ce70869"
    argv, home = _prepare(run, resume_session=session)
    assert "resume" not in argv  # no rollout: a fresh session
    rollout = home / "sessions" / "2026" / "12" / "04" / f"rollout-2026-12-04T17-29-09-{session}.jsonl"
    rollout.parent.mkdir(parents=True)
    rollout.write_text('{"type": "session_meta"}\n')
    argv, _ = _prepare(run, resume_session=session)
    assert argv[1:3] == ["resume", session] and argv[-1] == RESUME_PROMPT


def test_modes(run: RunFolder) -> None:
    def sandbox(mode: str, boxed: bool = False) -> tuple[str, str, bool]:
        argv, home = _prepare(run, mode, boxed=boxed)
        config = tomllib.loads((home / "config.toml").read_text())
        return config["approval_policy"], config["sandbox_mode"], "--dangerously-bypass-approvals-and-sandbox" in argv

    assert sandbox("on-request") == ("on-request", "workspace-write", False)
    assert sandbox("full-access") == ("never", "danger-full-access", False)
    assert sandbox("bypass") == ("never", "danger-full-access", True)
    # In orch's own boundary (a run's container, a worker's own sandbox) Codex's bubblewrap cannot run.
    assert sandbox("workspace-write", boxed=True) == ("never", "danger-full-access", False)
    with pytest.raises(UsageError, match="unknown permission mode"):
        _prepare(run, "yolo")


def test_a_workers_edits_to_its_home_do_not_survive_a_relaunch(run: RunFolder) -> None:
    """A lying worker that reaches its CODEX_HOME (hooks run outside Codex's sandbox) and rewrites its
    hooks, its sandbox or its provider: the next launch (a restart) writes orch's own again."""
    _, home = _prepare(run)
    pristine = {name: (home / name).read_text() for name in ("config.toml", "hooks.json")}
    (home / "hooks.json").write_text('{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "evil"}]}]}}')
    (home / "config.toml").write_text('sandbox_mode = "danger-full-access"\nmodel_provider = "openai"\n')
    (home / READY).touch()
    _prepare(run)
    assert {name: (home / name).read_text() for name in pristine} == pristine
    assert not (home / READY).exists()  # an old marker must not read as this life's boot

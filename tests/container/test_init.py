"""The container init under compose: what its gateway holds, told to `orch run`; its `--lead` argument."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orch.settings.compose import OFFLINE, RUN
from orch.settings.internal import GATEWAY_HOLDS

pytestmark = pytest.mark.pure  # starts nothing: no process, no engine, no connection

CANARY = "sk-ant-api03-CANARY-compose-0123456789abcdef"


def test_compose_live_fleet_checked_against_the_inits_gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """compose: the init tells (names, no secret) which agent kinds its gateway's credentials serve, and
    `orch run`, whose own environment holds none, checks a live fleet against that: two APIs both held run;
    one missing is refused in one line naming its variable; nothing told (offline): not set at all."""
    from orch.container.bootline import env_boot
    from orch.container.init import tell_held
    from orch.errors import UsageError
    from orch.fleet.rungateway import fleet_credentials
    from tests.helpers import orch

    monkeypatch.setenv(RUN.name, "demo")
    monkeypatch.setenv(OFFLINE.name, "0")
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", GATEWAY_HOLDS.name):
        monkeypatch.delenv(name, raising=False)  # the run's environment: no credential
    tell_held(env_boot({"ANTHROPIC_API_KEY": CANARY, "OPENAI_API_KEY": "sk-openai-x"}))
    held = os.environ[GATEWAY_HOLDS.name]
    assert {"claude", "codex"} <= set(held.split(",")) and CANARY not in held
    assert fleet_credentials(["claude", "codex"], offline=False) is not None  # both held: runs

    tell_held(env_boot({"ANTHROPIC_API_KEY": CANARY}))
    with pytest.raises(UsageError) as refused:
        fleet_credentials(["claude", "codex"], offline=False)
    line = refused.value.one_line()
    assert "codex: OPENAI_API_KEY" in line and "claude:" not in line.split("(it holds")[0] and "\n" not in line
    assert fleet_credentials(["claude", "codex"], offline=True).upstreams[0].kind == "scripted"
    # `orch spec check` (run by the init before it replaces an earlier run of the name) refuses it too.
    spec = tmp_path / "fleet.yaml"
    spec.write_text(
        "workdir: .\nagents:\n  - {agent: claude, workers: 1}\n  - {agent: codex, workers: 1}\ntasks:\n  - {goal: g}\n"
    )
    checked = orch("spec", "check", spec)
    assert checked.exit_code == 2 and "codex: OPENAI_API_KEY" in checked.output, checked.output

    monkeypatch.setenv(OFFLINE.name, "1")
    tell_held(env_boot({"ANTHROPIC_API_KEY": CANARY}))
    assert GATEWAY_HOLDS.name not in os.environ


def test_compose_lead_takes_the_spec_or_resume(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """compose's `lead`: `init --lead SPEC` starts the spec afresh, `--lead --resume` continues the run;
    anything else is one line and exit 2, before anything is done."""
    from orch.container import compose, init
    from orch.container.bootline import InitError

    assert compose.parse_lead(["/workspace/fleet.yaml"], "ci") == compose.Lead("ci", "/workspace/fleet.yaml")
    resume = compose.parse_lead(["--resume"], "ci")
    assert resume.spec is None
    assert compose.lead_command(resume)[-4:] == ["serve-run", "ci", "--drive", "--resume"]
    with pytest.raises(InitError, match="needs ORCH_RUN"):
        compose.parse_lead(["x.yaml"], None)
    for var, value in (("ORCH_RUN", "ci"), ("ORCH_UID", "1000"), ("ORCH_GID", "1000")):
        monkeypatch.setenv(var, value)
    for argv in (["--lead"], ["--lead", "a.yaml", "b.yaml"], ["--lead", ""]):
        assert init.main(argv) == 2
        assert "--lead takes one argument" in capsys.readouterr().err

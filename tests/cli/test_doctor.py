"""`orch doctor`'s upstream lines (orch/cli/doctor.py): each credential the gateway would hold for a fleet,
never its value; a missing one fails a fleet that needs it and is only a note without a fleet."""

from __future__ import annotations

from pathlib import Path

import pytest

from orch.cli.doctor import upstream_checks
from tests.gateway.test_credential import ANTHROPIC_KEY, OPENAI_KEY
from tests.helpers import orch, stand_in_binaries


def test_doctor_lists_each_credential_the_gateway_would_hold_for_a_fleet(monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in_binaries(monkeypatch)  # the agents' own lines are not this test's

    for var in ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    result = orch("doctor", "--agents", "claude:2,codex:1")
    lines = [line for line in result.output.splitlines() if "upstream" in line]
    assert lines == [
        "ok upstream       claude -> http://127.0.0.1:9 (anthropic): ANTHROPIC_API_KEY, sent as x-api-key",
        "!! upstream       codex -> https://api.openai.com/v1 (openai-responses): no credential (OPENAI_API_KEY unset)",
    ]
    assert result.exit_code == 1 and ANTHROPIC_KEY not in result.output
    # Without a fleet: every model API, a missing credential only a note.
    assert all(check.optional for check in upstream_checks(None) if not check.ok)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    checks = upstream_checks(["claude", "codex", "opencode"])
    assert all(check.ok for check in checks) and OPENAI_KEY not in repr(checks)
    assert checks[1].detail == (
        "codex+opencode -> https://api.openai.com/v1 (openai-responses, openai-chat): OPENAI_API_KEY, sent as bearer"
    )
    bad = orch("doctor", "--agents", "nope:1")
    assert bad.exit_code == 2 and len(bad.output.strip().splitlines()) == 1


def test_a_fleet_of_one_model_api_with_no_credential_fails_as_its_help_says(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`orch doctor --agents claude:2` exited 0 with no key anywhere: every call of such a run is refused."""
    stand_in_binaries(monkeypatch)
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no login file of Claude Code's either
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    result = orch("doctor", "--agents", "claude:2")
    assert result.exit_code == 1
    assert "!! upstream       claude -> https://api.anthropic.com (anthropic): no credential" in result.output
    login = tmp_path / "claude" / ".credentials.json"  # a login of its own, passed through: enough
    login.parent.mkdir()
    login.write_text("{}")
    assert "the agent's login file, passed through" in orch("doctor", "--agents", "claude:2").output

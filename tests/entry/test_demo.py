"""`orch demo` (orch/entry/demo.py): its spec is valid; `--live` without credentials is one clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import orch

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network


def test_demo_spec_is_valid() -> None:
    from orch.entry.demo import prepare

    spec, _ = prepare("demo-check")
    assert spec.offline and [t.worker for t in spec.tasks] == [1, 2]
    assert spec.verification.verifiers_per_finding == 2


def test_demo_live_without_credentials_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "no-login"))
    result = orch("demo", "--live", "--local")
    assert result.exit_code == 2
    assert (
        "orch demo --live needs credentials for its claude workers" in result.output
        and "without --live" in result.output
    )

"""Gemini CLI's policy file, as TOML (tomli-w writes it; tomllib reads it back as the CLI would)."""

from __future__ import annotations

import tomllib

import pytest

from orch.agents.gemini import ALLOWED_TOOLS, DENIED_COMMANDS, POLICY

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network


def test_the_policy_allows_the_workers_tools_and_refuses_the_destructive_few() -> None:
    allow, deny = tomllib.loads(POLICY)["rule"]
    assert allow == {"toolName": list(ALLOWED_TOOLS), "decision": "allow", "priority": 500, "allowRedirection": True}
    assert deny["toolName"] == "run_shell_command" and deny["decision"] == "deny"
    assert deny["commandPrefix"] == list(DENIED_COMMANDS) and deny["priority"] > allow["priority"]
    assert POLICY.startswith("# Written by orch")

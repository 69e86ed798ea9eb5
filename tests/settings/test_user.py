"""orch.settings.user: each agent's ORCH_<NAME>_BIN found by its name, log levels in any case."""

from __future__ import annotations

import pytest

from orch.agents.registry import ADAPTERS
from orch.settings.user import LOG_LEVEL, agent_bin

pytestmark = pytest.mark.pure


@pytest.mark.parametrize("agent", sorted(set(ADAPTERS) - {"scripted"}))
def test_every_real_agent_has_its_bin_setting(agent: str) -> None:
    setting = agent_bin(agent)
    assert setting is not None and setting.name == f"ORCH_{agent.upper()}_BIN"
    assert setting.get({}) is None, "unset: the adapter looks on PATH, then at its pinned copy"
    assert setting.get({setting.name: "/opt/x"}) == "/opt/x"


def test_no_bin_setting_for_an_agent_without_one() -> None:
    assert agent_bin("scripted") is None


def test_a_log_level_is_read_in_any_case() -> None:
    assert LOG_LEVEL.get({LOG_LEVEL.name: "info"}) == "INFO"

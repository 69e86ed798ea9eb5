"""Which upstreams a fleet's gateway holds (orch/gateway/credential.py): one per model API, shared by the
agents of one credential; offline, the scripted model; a missing credential across model APIs refused up front."""

from __future__ import annotations

import pytest

from orch.errors import UsageError
from orch.gateway.credential import fleet_upstreams
from orch.gateway.modeldir import Scheme
from orch.modelaccess import Credentials

pytestmark = pytest.mark.pure  # starts nothing

ANTHROPIC_KEY = "sk-ant-api03-orch-test-ANTHROPIC-0f1e2d3c4b5a69788796a5b4c3d2e1f0"
OPENAI_KEY = "sk-proj-orch-test-OPENAI-a1b2c3d4e5f60718293a4b5c6d7e8f90"
CLAUDE = Credentials(
    env=("ANTHROPIC_API_KEY",),
    base_url_env="ANTHROPIC_BASE_URL",
    api_url="https://api.anthropic.com",
    schemes=(("ANTHROPIC_API_KEY", "x-api-key"),),
    protocols=("anthropic",),
)
CODEX = Credentials(
    env=("OPENAI_API_KEY",),
    base_url_env="OPENAI_BASE_URL",
    api_url="https://api.openai.com/v1",
    schemes=(("OPENAI_API_KEY", "bearer"),),
    protocols=("openai-responses",),
)
OPENCODE = Credentials(
    env=("OPENAI_API_KEY",),
    base_url_env="OPENAI_BASE_URL",
    api_url="https://api.openai.com/v1",
    schemes=(("OPENAI_API_KEY", "bearer"),),
    protocols=("openai-chat",),
)


def test_a_fleet_across_model_apis_gets_one_upstream_each_and_shares_one_per_credential() -> None:
    env = {"ANTHROPIC_API_KEY": ANTHROPIC_KEY, "OPENAI_API_KEY": OPENAI_KEY}
    found = fleet_upstreams({"claude": CLAUDE, "codex": CODEX, "opencode": OPENCODE}, env, offline=False)
    assert [(u.name, u.url, u.scheme, u.protocols) for u in found.upstreams] == [
        ("claude", "https://api.anthropic.com", Scheme.API_KEY, ["anthropic"]),
        ("codex+opencode", "https://api.openai.com/v1", Scheme.BEARER, ["openai-responses", "openai-chat"]),
    ]
    assert found.variables == {"claude": "ANTHROPIC_API_KEY", "codex+opencode": "OPENAI_API_KEY"}
    assert found.schemes == "x-api-key,bearer" and found.warning is None and found.login_file is None
    # Offline: the scripted model for all; one model API: today's single upstream (and its fallbacks).
    assert [u.kind for u in fleet_upstreams({"claude": CLAUDE, "codex": CODEX}, {}, offline=True).upstreams] == [
        "scripted"
    ]
    alone = fleet_upstreams({"codex": CODEX}, {}, offline=False)
    assert alone.scheme is Scheme.NONE and alone.warning is not None
    # Across model APIs, a missing credential is refused up front, naming the variable(s).
    with pytest.raises(UsageError) as refused:
        fleet_upstreams({"claude": CLAUDE, "codex": CODEX}, {"ANTHROPIC_API_KEY": ANTHROPIC_KEY}, offline=False)
    assert "codex: OPENAI_API_KEY" in refused.value.message and "claude" not in refused.value.message
    assert "\n" not in refused.value.one_line()

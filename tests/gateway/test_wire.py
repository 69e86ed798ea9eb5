"""The gateway's boot line (orch/gateway/wire.py): the only place its secrets are written out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import SecretStr

from orch.gateway.modeldir import Scheme, Upstream
from orch.gateway.wire import boot_line
from tests.gateway.gw import boot_for
from tests.gateway.test_credential import ANTHROPIC_KEY, OPENAI_KEY

pytestmark = pytest.mark.pure  # starts nothing


def test_boot_line_carries_every_secret_and_dumps_none(tmp_path: Path) -> None:
    ups = [
        Upstream(url="http://a", scheme=Scheme.API_KEY, secret=SecretStr(ANTHROPIC_KEY), agents=["claude"]),
        Upstream(url="http://b", scheme=Scheme.BEARER, secret=SecretStr(OPENAI_KEY), agents=["codex"]),
    ]
    boot = boot_for(tmp_path, None).model_copy(update={"upstreams": ups})
    line = json.loads(boot_line(boot))
    assert [u["secret"] for u in line["upstreams"]] == [ANTHROPIC_KEY, OPENAI_KEY]
    assert ANTHROPIC_KEY not in boot.model_dump_json() and OPENAI_KEY not in repr(boot)

"""A fleet spec the lead's tests share, and the spec's issues as `orch spec check` lists them."""

from __future__ import annotations

from pathlib import Path

import pytest

from orch.spec.load import SpecError, parse_spec

GOOD = """\
workdir: .
workers: 3
tasks:
  - goal: Determine whether the parser rejects malformed input.
"""


def issues(text: str, base: Path) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(text, "fleet.yaml", base)
    return [str(i) for i in info.value.issues]

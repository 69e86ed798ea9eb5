"""`orch spec schema` prints the schema orch ships (tests/spec/test_reference.py: made from the models)."""

from __future__ import annotations

import json

import pytest

from orch.cli.spec import schema_file
from tests.helpers import orch

pytestmark = pytest.mark.pure  # starts nothing


def test_spec_schema_prints_the_shipped_schema() -> None:
    result = orch("spec", "schema")
    assert result.exit_code == 0
    assert result.output == schema_file().read_text(encoding="utf-8")
    assert json.loads(result.output)["properties"]["tasks"]["description"]

"""The spec's reference is made from its models: docs/spec.md and the shipped JSON Schema are current, every
key has a meaning, and the schema accepts every spec orch ships and refuses what the models refuse."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from orch.cli.spec import schema_file
from orch.spec import reference as specdoc
from orch.spec.model import example_spec
from orch.spec.placement import SWARM_CONSTRAINT

pytestmark = pytest.mark.pure  # reads files only

REPO = Path(__file__).resolve().parents[2]


def test_docs_spec_md_is_current() -> None:
    page = REPO / "docs" / "spec.md"
    assert page.read_text(encoding="utf-8") == specdoc.markdown(), "run: python -m orch.spec.reference docs/spec.md"


def test_the_shipped_schema_is_current() -> None:
    assert schema_file().read_text(encoding="utf-8") == specdoc.schema_text(), (
        "run: python -m orch.spec.reference --schema orch/data/fleet.schema.json"
    )


def test_every_key_has_a_meaning() -> None:
    schema = specdoc.schema()
    missing = [
        f"{name}.{key}"
        for name, model in [("FleetSpec", schema), *schema["$defs"].items()]
        for key, prop in model.get("properties", {}).items()
        if not prop.get("description")
    ]
    assert not missing, "give these a docstring in orch/spec/model.py: " + ", ".join(missing)
    for section in specdoc.SECTIONS:
        assert all(row.count("|") >= 5 for row in specdoc.rows(section))


@pytest.mark.parametrize(
    "text",
    [example_spec(), (REPO / "orch" / "data" / "demo" / "fleet.yaml").read_text()],
    ids=["example", "demo"],
)
def test_the_schema_accepts_orchs_own_specs(text: str) -> None:
    jsonschema.validate(yaml.safe_load(text), specdoc.schema())


@pytest.mark.parametrize(
    "spec",
    [
        {"tasks": [{"goal": "x", "rol": "finder"}]},
        {"tasks": [{"goal": "x", "role": "auditor"}]},
        {"tasks": []},
        {"tasks": [{"goal": "x"}], "limits": {"memory_per_worker": "lots"}},
        {"tasks": [{"goal": "x"}], "placement": {"constraints": ["node.role==worker", "zone=eu"]}},
    ],
    ids=["unknown-key", "unknown-role", "no-tasks", "bad-size", "bad-constraint"],
)
def test_the_schema_refuses_what_the_models_refuse(spec: dict[str, object]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(spec, specdoc.schema())


def test_the_schemas_constraint_pattern_is_the_loaders() -> None:
    placement = specdoc.schema()["$defs"]["PlacementSpec"]["properties"]["constraints"]["items"]
    assert placement["pattern"] == SWARM_CONSTRAINT.pattern
    for good in ("node.labels.zone==eu", "node.role != manager"):
        jsonschema.validate({"tasks": [{"goal": "x"}], "placement": {"constraints": [good]}}, specdoc.schema())


def test_sizes_read_as_the_loader_reads_them() -> None:
    for size in ("2g", "512m", "2GiB", "off", 1 << 30):
        jsonschema.validate({"tasks": [{"goal": "x"}], "limits": {"memory_per_worker": size}}, specdoc.schema())
    assert json.loads(specdoc.schema_text())["$id"] == specdoc.SCHEMA_ID

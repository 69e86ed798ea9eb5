"""The fleet spec's reference, made from its models so it cannot drift from them: the JSON Schema `orch spec
schema` prints (and editors read through the `yaml-language-server` line `orch spec init` writes), and
docs/spec.md, a table of every key with its type, default and meaning (`python -m orch.spec.reference`
writes it, and with `--schema` the schema shipped as orch/data/fleet.schema.json; tests/spec/test_reference.py
checks both are current).

A field's meaning is its attribute docstring in orch.spec.model. pydantic could read those itself
(`use_attribute_docstrings`), but at the cost of parsing the models' source at every import (orch.run.records
says why not), so they are read here, only when a reference is made."""

from __future__ import annotations

import ast
import copy
import enum
import functools
import inspect
import itertools
import json
import sys
import textwrap
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from orch.spec.model import STEP_EXTRAS, STEP_KINDS, FleetSpec, Role
from orch.spec.placeholders import PLACEHOLDERS

SCHEMA_ID = "https://orch.invalid/fleet.schema.json"
SECTIONS: dict[str, str] = {
    "": "FleetSpec",
    "agents[]": "AgentGroup",
    "tasks[]": "TaskSpec",
    "roles.ROLE": "RoleSpec",
    "verification": "VerificationSpec",
    "timeouts": "Timeouts",
    "limits": "Limits",
    "budget": "Budget",
    "changes": "ChangesSpec",
    "notify": "NotifyConfig",
    "notify.webhooks[]": "Webhook",
    "placement": "PlacementSpec",
}
"""The reference's sections, in its order: where the keys sit in a spec -> the model that holds them."""


@functools.cache
def models() -> dict[str, type[BaseModel] | type[enum.Enum]]:
    """Every model and enum a fleet spec is made of, by name (the JSON Schema's `$defs` names)."""
    found: dict[str, type[BaseModel] | type[enum.Enum]] = {}

    def visit(kind: Any) -> None:
        if isinstance(kind, type) and issubclass(kind, BaseModel | enum.Enum):
            if kind.__name__ in found:
                return
            found[kind.__name__] = kind
            if issubclass(kind, BaseModel):
                for field in kind.model_fields.values():
                    visit(field.annotation)
        for arg in typing.get_args(kind):
            visit(arg)

    visit(FleetSpec)
    return found


def docstrings(kind: type) -> dict[str, str]:
    """A class's attribute docstrings (the string just below `name: type = ...`, or below an enum member)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(kind)))
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    out: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        target: ast.expr | None = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if not isinstance(target, ast.Name):
            continue
        if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
            out[target.id] = " ".join(after.value.value.split())
    return out


def _enum_meaning(kind: type[enum.Enum]) -> str:
    notes = docstrings(kind)
    return "; ".join(f"`{m.value}`: {notes[m.name].rstrip('.')}" for m in kind if m.name in notes)


def schema() -> dict[str, Any]:
    """The JSON Schema of a fleet spec, each key described by its docstring."""
    return copy.deepcopy(_schema())


def _sections() -> tuple[str, ...]:
    """The top-level keys whose value may be null, taken as their defaults (FleetSpec's validator says which)."""
    return FleetSpec.__pydantic_decorators__.field_validators["_empty_section_is_default"].info.fields


@functools.cache
def _schema() -> dict[str, Any]:
    out = FleetSpec.model_json_schema()
    # A section whose keys are all commented out is null in YAML, and takes its defaults.
    for name in _sections():
        prop = out["properties"][name]
        prop["anyOf"] = [{key: prop.pop(key) for key in ("$ref", "type", "additionalProperties", "propertyNames")
                          if key in prop}, {"type": "null"}]  # fmt: skip
    defs = out.get("$defs", {})
    for name, kind in models().items():
        target = out if kind is FleetSpec else defs.get(name)
        if target is None:
            continue
        if issubclass(kind, enum.Enum):
            if meaning := _enum_meaning(kind):
                target["description"] = meaning
            continue
        notes = docstrings(kind)
        for key, prop in target.get("properties", {}).items():
            if key in notes:
                prop["description"] = notes[key]
        if kind.__doc__:
            target["description"] = " ".join(inspect.cleandoc(kind.__doc__).split())
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **out}


def schema_text() -> str:
    return json.dumps(schema(), indent=2) + "\n"


# --- docs/spec.md ---------------------------------------------------------------------------------------


def _type(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    """A property's type, for people: `integer ≥ 1`, `finder` \\| `writer`, list of tasks, ..."""
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[-1]
        target = defs[name]
        if "enum" in target:
            return " | ".join(f"`{v}`" for v in target["enum"])
        section = next((key for key, model in SECTIONS.items() if model == name), name)
        return f"mapping ([{section}](#{_anchor(section)}))"
    if _is_size(prop):
        least = prop["anyOf"][0]["minimum"]
        return "a size (`512m`, `2g`, or bytes) or `off`" if least >= 1 << 20 else f"a count (≥ {least}) or `off`"
    if "anyOf" in prop:
        kinds = [k for k in prop["anyOf"] if k.get("type") != "null"]
        shown = " or ".join(_type(k, defs) for k in kinds)
        return shown if len(kinds) == len(prop["anyOf"]) else f"{shown}, or null"
    kind = prop.get("type")
    if kind == "array":
        return f"list of {_type(prop.get('items', {}), defs)}"
    if kind == "object":
        if "additionalProperties" in prop and isinstance(prop["additionalProperties"], dict):
            keys = _type(prop.get("propertyNames", {"type": "string"}), defs)
            return f"mapping of {keys} to {_type(prop['additionalProperties'], defs)}"
        return "mapping"
    if "minimum" in prop and "maximum" in prop:
        return f"{kind} from {prop['minimum']} to {prop['maximum']}"
    signs = (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"))
    bounds = [f"{sign} {prop[key]}" for key, sign in signs if key in prop]
    if "minLength" in prop:
        bounds.append("(not empty)")
    return " ".join([str(kind or "any"), *bounds])


def _is_size(prop: dict[str, Any]) -> bool:
    return any("kKmMgG" in kind.get("pattern", "") for kind in prop.get("anyOf", []))


def _default(field: FieldInfo, prop: dict[str, Any]) -> str:
    """A key's default as a spec would write it; a section's is its own keys' defaults."""
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "its keys' defaults"
    if value is None or value in ({}, []):
        return "none"
    if isinstance(value, enum.Enum):
        value = value.value
    if _is_size(prop) and isinstance(value, int):
        for unit, size in (("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
            if value % size == 0:
                return f"`{value // size}{unit}`"
    return f"`{value}`" if isinstance(value, str | Path) else f"`{json.dumps(value)}`"


def _anchor(section: str) -> str:
    return (section or "top-level keys").replace(".", "").replace("[]", "").lower().replace(" ", "-")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def rows(section: str) -> Iterator[str]:
    """One table row per key of a section's model."""
    full = _schema()
    defs = full["$defs"]
    model = full if SECTIONS[section] == "FleetSpec" else defs[SECTIONS[section]]
    kind = models()[SECTIONS[section]]
    assert issubclass(kind, BaseModel)
    for key, prop in model["properties"].items():
        meaning = _cell(prop.get("description", ""))
        # A section may be left empty (null) for its defaults, which its default says: its type is its mapping.
        shown = _cell(_type(prop["anyOf"][0] if key in _sections() else prop, defs))
        yield f"| `{key}` | {shown} | {_default(kind.model_fields[key], prop)} | {meaning} |"


INTRO = """\
# The fleet spec: every key

<!-- Generated from orch/spec/model.py by `python -m orch.spec.reference docs/spec.md`; do not edit by hand
(tests/spec/test_reference.py fails when it is not current). -->

A fleet spec is the YAML file `orch run FLEET.yaml` runs. Unknown keys are errors (a misspelt one gets a
"did you mean"), and paths are relative to the spec's folder. `orch spec init fleet.yaml` writes a commented
example; `orch spec check fleet.yaml` makes every check `orch run` makes before it starts; `orch spec schema`
prints the JSON Schema these tables are made from, which the `# yaml-language-server: $schema=...` line that
`spec init` writes points editors at (keys complete, wrong values are underlined).

A default of "none" means the key is unset unless its meaning says what orch does then.
"""


def markdown() -> str:
    parts = [INTRO]
    for section in SECTIONS:
        title = f"`{section}`" if section else "Top-level keys"
        parts.append(f"\n## {title}\n")
        doc = models()[SECTIONS[section]].__doc__
        if section and doc:
            parts.append("\n" + " ".join(inspect.cleandoc(doc).split()) + "\n")
        parts.append("\n| key | type | default | meaning |\n|---|---|---|---|\n")
        parts.append("\n".join(rows(section)) + "\n")
    parts.append(_steps())
    parts.append(_placeholders())
    return "".join(parts)


def _steps() -> str:
    extras = ", ".join(f"`{kind}` may add `{extra}`" for kind, extra in STEP_EXTRAS.items())
    kinds = ", ".join(f"`{kind}`" for kind in STEP_KINDS)
    return (
        "\n## Offline steps (`offline_script`)\n\n"
        f"With `offline: true`, each step is a mapping with exactly one of {kinds}: the scripted model makes "
        f"the real agent run it ({extras}). Strings may use the role's placeholders.\n"
    )


def _placeholders() -> str:
    lines = "".join(
        f"| `{role.value}` | {', '.join(f'`{{{{{name}}}}}`' for name in PLACEHOLDERS[role])} |\n" for role in Role
    )
    return (
        "\n## Placeholders of each role's template\n\n"
        "A brief template (`roles.ROLE.template`) and offline steps may use these; `orch spec check` refuses "
        "any other.\n\n| role | placeholders |\n|---|---|\n" + lines
    )


def main(argv: list[str]) -> int:
    """`python -m orch.spec.reference [--schema] [FILE]`: write docs/spec.md, or with --schema the JSON Schema
    (orch/data/fleet.schema.json), to FILE or stdout."""
    schema_only = argv[:1] == ["--schema"]
    rest = argv[1:] if schema_only else argv
    text = schema_text() if schema_only else markdown()
    if rest:
        Path(rest[0]).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

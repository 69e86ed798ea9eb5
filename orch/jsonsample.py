"""A small value satisfying a JSON schema: what the gateway's replay and the scripted model answer when an
agent asks for structured output (a session title) that no recording or script holds."""

from __future__ import annotations

import json
from typing import Any

DEPTH = 32
"""Objects nested deeper than this are sampled as None: the schema comes from a worker's request."""


def sample(schema: object, text: str, number: int = 0, depth: int = 0) -> Any:
    """The first enum value, an object of its properties' samples, `text` for a string, `number` for a number,
    False, [], or None for what it does not know. Types in either case: Gemini CLI writes OBJECT, STRING."""
    if not isinstance(schema, dict) or depth > DEPTH:
        return None
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    kind = str(schema.get("type", "")).lower()
    if kind == "object":
        props = schema.get("properties")
        props = props if isinstance(props, dict) else {}
        return {k: sample(v, text, number, depth + 1) for k, v in props.items() if isinstance(v, dict)}
    return {"string": text, "boolean": False, "integer": number, "number": number, "array": []}.get(kind)


def sample_text(schema: object, text: str, number: int = 0) -> str:
    """The text answering a call that asks for structured output (`schema`): the JSON of its sample; `text`
    itself when the call asks for none."""
    return json.dumps(sample(schema, text, number)) if isinstance(schema, dict) else text

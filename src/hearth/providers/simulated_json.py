"""JSON answers of the ``simulated`` provider, for requests that ask for JSON (``response_format``).

An endpoint of the demo declares the ``json`` capability, so a ``json_object`` request must get a JSON object
and a ``json_schema`` request a document valid against the schema — else the demo would advertise what it
does not do. The values are placeholders that say they are simulated: strings ``"[simulated]"`` (or the
schema's first ``enum``/``const``/``default``), numbers their ``minimum`` or 0, arrays their ``minItems``
placeholders. Deterministic, like every simulated answer.
"""

from __future__ import annotations

from typing import Any

import orjson

PLACEHOLDER = "[simulated]"
_MAX_DEPTH = 16  # a self-referencing or absurdly deep schema gets null below this


def json_answer(body: dict[str, Any], said: str) -> str | None:
    """The JSON text answering ``body`` if its ``response_format`` asks for JSON, else None."""
    fmt = body.get("response_format")
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "json_object":
        return orjson.dumps({"simulated": True, "received": said}).decode()
    if kind == "json_schema":
        spec = fmt.get("json_schema") if isinstance(fmt, dict) else None
        schema = spec.get("schema") if isinstance(spec, dict) else None
        return orjson.dumps(placeholder(schema if isinstance(schema, dict) else {})).decode()
    return None


def placeholder(schema: dict[str, Any], depth: int = 0) -> Any:
    """A value valid against the plain parts of ``schema`` (type, properties, required, items, enum, const,
    minimum, minItems, anyOf/oneOf/allOf); ``$ref`` and patterns are not followed."""
    if depth > _MAX_DEPTH:
        return None
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options and isinstance(options[0], dict):
            return placeholder(options[0], depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None and isinstance(schema.get("properties"), dict):
        kind = "object"
    return _of_type(str(kind), schema, depth)


def _of_type(kind: str, schema: dict[str, Any], depth: int) -> Any:
    if kind == "object":
        props = schema.get("properties")
        props = props if isinstance(props, dict) else {}
        return {name: placeholder(sub if isinstance(sub, dict) else {}, depth + 1) for name, sub in props.items()}
    if kind == "array":
        items = schema.get("items")
        count = schema.get("minItems")
        count = count if type(count) is int and 0 < count <= 100 else 0
        return [placeholder(items if isinstance(items, dict) else {}, depth + 1) for _ in range(count)]
    if kind in ("number", "integer"):
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        value = low if isinstance(low, int | float) and not isinstance(low, bool) else 0
        value = value + 1 if "exclusiveMinimum" in schema and "minimum" not in schema else value
        return int(value) if kind == "integer" else value
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    length = schema.get("minLength")
    text = PLACEHOLDER
    if type(length) is int and length > len(text):
        text += "." * (length - len(text))
    return text

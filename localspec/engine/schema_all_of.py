"""An object built from parts (`allOf`) and closed by `unevaluatedProperties: false`, written as one object.

The usual way to extend a base object and still refuse other keys is

    {"allOf": [{"$ref": "#/$defs/task"}, {"properties": {"priority": ...}}], "unevaluatedProperties": false}

(`additionalProperties: false` in a part would refuse the other part's properties). llguidance does not
implement `unevaluatedProperties`: it warns, and takes any key. Where every part is a plain object (its
`properties` and `required`, nothing that evaluates other keys: no `additionalProperties`,
`patternProperties`, branches or conditionals), read through local `$ref`s, the object is exactly the one
whose properties are all the parts' (a property two parts name takes both schemas), whose required names are
all theirs, and that takes no other key: written so, as llguidance holds it. An object that says
`unevaluatedProperties: false` beside plain `properties` alone is the same as `additionalProperties: false`.
Any other `unevaluatedProperties` keeps llguidance's warning.
"""

from __future__ import annotations

from typing import Any

from .schema_keywords import ANNOTATIONS, is_count, refers_from_root, refers_into, resolved, rewritten_bottom_up

# What a part (or the object itself) may say and be merged: nothing that would evaluate keys it does not name.
_PLAIN_OBJECT_KEYS = {"type", "properties", "required", "minProperties", "maxProperties"} | ANNOTATIONS
_ROOT_KEYS = {"$schema", "$id", "$defs", "definitions"}  # what the object itself may say besides, kept as it is


def parts_as_one_object(schema: Any) -> Any:
    """`schema` with each object of plain parts closed by `unevaluatedProperties: false` written as one closed
    object (a new schema; the input untouched). A schema under which a `$ref` might not name what it names from
    the root (a nested `$id`), or that points into an `allOf`, is returned as it is."""
    if not refers_from_root(schema) or refers_into(schema, "allOf"):
        return schema
    root = schema

    def change(node: dict[str, Any]) -> dict[str, Any]:
        if node.get("unevaluatedProperties") is not False:
            return node
        parts = node.get("allOf", [])
        own = {key: value for key, value in node.items() if key not in ("allOf", "unevaluatedProperties", *_ROOT_KEYS)}
        if not isinstance(parts, list) or not _plain_object(own):
            return node
        resolved_parts = [resolved(part, root) for part in parts]
        if not all(isinstance(part, dict) and _plain_object(part) for part in resolved_parts):
            return node
        kept = {key: value for key, value in node.items() if key in _ROOT_KEYS}
        return {**kept, **_merged([own, *resolved_parts])}

    return rewritten_bottom_up(schema, change)


def _plain_object(schema: dict[str, Any]) -> bool:
    """Whether `schema` is an object's that names its properties and nothing that evaluates other keys (see the
    module's docstring), each keyword well formed (a malformed one: as written, for llguidance to report)."""
    required = schema.get("required", [])
    return (schema.keys() <= _PLAIN_OBJECT_KEYS and schema.get("type", "object") in ("object", ["object"])
            and isinstance(schema.get("properties", {}), dict)
            and isinstance(required, list) and all(isinstance(name, str) for name in required)
            and all(is_count(schema[key]) for key in ("minProperties", "maxProperties") if key in schema))


def _merged(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One closed object of `parts`: their properties (a name in several: all its schemas), their required names,
    the tightest counts, their annotations (the first part's first)."""
    merged: dict[str, Any] = {}
    for part in reversed(parts):
        merged.update({key: value for key, value in part.items() if key in ANNOTATIONS})
    schemas: dict[str, list[Any]] = {}
    for part in parts:
        for name, value in part.get("properties", {}).items():
            if value not in schemas.setdefault(name, []):
                schemas[name].append(value)
    required = [name for part in parts for name in part.get("required", [])]
    if any("type" in part for part in parts):  # (untyped, other values pass as they did)
        merged["type"] = "object"
    merged["properties"] = {name: found[0] if len(found) == 1 else {"allOf": found} for name, found in schemas.items()}
    if required:
        merged["required"] = list(dict.fromkeys(required))
    for key, pick in (("minProperties", max), ("maxProperties", min)):
        counts = [part[key] for part in parts if key in part]
        if counts:
            merged[key] = pick(counts)
    merged["additionalProperties"] = False
    return merged

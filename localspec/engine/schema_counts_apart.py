"""Arrays and objects whose own counts leave them no value.

`minContains` above `maxContains`, `minProperties` above `maxProperties`, above the properties an object closed to
other keys lists, or `maxProperties` below the properties it requires: no value meets them. llguidance (1.x) does
not implement `contains`, so it writes arrays that miss such counts, and it refuses the property counts counting
only the required properties ("minProperties (2) is greater than number of properties (0)"), or inside a branch
only warns of them. Where every document holds such a value the schema is refused in these words
(`grammar.counts_beyond_reach`); elsewhere (a branch, an optional property) the value is written as `false`, the
schema no value meets, which is what it is.
"""

from __future__ import annotations

from typing import Any

from .schema_keywords import is_count, rewritten_bottom_up, schemas_in


def counts_apart(value_schema: dict[str, Any], kind: str) -> str | None:
    """What an array's (`kind` "array") or an object's ("object") own counts ask that no value meets (see the
    module's text), or None. (An array's counts say nothing of an object, nor an object's of an array.)"""
    if kind == "array":
        least, most = value_schema.get("minContains", 1), value_schema.get("maxContains")
        if "contains" in value_schema and is_count(least) and is_count(most) and least > most:
            return f"minContains {least} is more than maxContains {most}"
        return None
    properties, required = value_schema.get("properties", {}), value_schema.get("required", [])
    if not isinstance(properties, dict) or not isinstance(required, list):
        return None
    least, most = value_schema.get("minProperties"), value_schema.get("maxProperties")
    if is_count(least) and is_count(most) and least > most:
        return f"minProperties {least} is more than maxProperties {most}"
    closed = value_schema.get("additionalProperties") is False and "patternProperties" not in value_schema
    taken = sum(1 for schema in properties.values() if schema is not False)
    if closed and is_count(least) and least > taken:
        return f"minProperties {least} is more than the {_properties(taken)} the object takes"
    named = {name for name in required if isinstance(name, str)}
    if is_count(most) and most < len(named):
        return f"maxProperties {most} is fewer than the {_properties(len(named))} the object requires"
    return None


def counts_apart_as_false(schema: Any) -> Any:
    """`schema` with each schema of an array or an object alone (its `type`) whose counts no value meets written
    as `false` (a new schema; the input untouched)."""
    if any("$ref" in node for node in schemas_in(schema)):
        return schema  # (a `$ref` may point inside a value written as `false`)
    return rewritten_bottom_up(schema, lambda node: False if _of_one_kind(node) and counts_apart(node, node["type"])
                               else node)


def _of_one_kind(node: dict[str, Any]) -> bool:
    return node.get("type") in ("array", "object")


def _properties(count: int) -> str:
    return f"{count} propert{'y' if count == 1 else 'ies'}"

"""`propertyNames` written as keys llguidance holds: a pattern as `patternProperties`, listed names as properties.

llguidance does not implement `propertyNames` (it warns, and takes any key).
The maps real schemas use it on list no property of their own: environment
variables by a pattern, a recipe's ingredients by name, a workflow's events
from an enum. There `{"propertyNames": {"pattern": P}, "additionalProperties":
S}` takes exactly the keys and values `{"patternProperties": {P: S},
"additionalProperties": false}` does, and names from an `enum` or a `const` are
the object's only optional properties, each of schema S. Only such objects
are rewritten; any other keeps llguidance's warning.
"""

from __future__ import annotations

from typing import Any

from .schema_keywords import ANNOTATIONS, refers_from_root, resolved, rewritten_bottom_up

# An object that says no more than these of its keys is a map whose names `propertyNames` alone decides.
_MAP_KEYS = {"type", "propertyNames", "additionalProperties", "minProperties", "maxProperties", "required", "$defs",
             "definitions", "$schema"} | ANNOTATIONS
_NAME_KEYS = {"type", "pattern", "enum", "const"} | ANNOTATIONS  # what the names' schema may say


def property_names_as_keys(schema: Any) -> Any:
    """`schema` with each map's `propertyNames` (a pattern, or listed names) written as keys llguidance holds (a
    new schema; the input untouched). A schema under which a `$ref` might not name what it names from the root (a
    nested `$id`) is returned as it is."""
    if not refers_from_root(schema):
        return schema
    root = schema

    def change(node: dict[str, Any]) -> dict[str, Any]:
        names = resolved(node.get("propertyNames"), root)
        if "propertyNames" not in node or not node.keys() <= _MAP_KEYS or not _names_schema(names):
            return node
        values = node.get("additionalProperties", True)
        rewritten = {key: value for key, value in node.items() if key not in ("propertyNames", "additionalProperties")}
        if "pattern" in names:
            rewritten["patternProperties"] = {names["pattern"]: values}
        else:
            listed = names["enum"] if "enum" in names else [names["const"]]
            rewritten["properties"] = {name: values for name in listed if isinstance(name, str)}
        rewritten["additionalProperties"] = False
        return rewritten

    return rewritten_bottom_up(schema, change)


def _names_schema(names: Any) -> bool:
    """Whether `names` says of a key only one thing this rewrite writes: a pattern, or listed names."""
    if not (isinstance(names, dict) and names.keys() <= _NAME_KEYS and names.get("type", "string") == "string"
            and len(names.keys() & {"pattern", "enum", "const"}) == 1):
        return False
    return isinstance(names["pattern"], str) if "pattern" in names else isinstance(names.get("enum", []), list)

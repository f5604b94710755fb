"""`propertyNames` written as keys llguidance holds: a pattern as `patternProperties`, listed names as properties.

llguidance does not implement `propertyNames` (it warns, and takes any key).
The maps real schemas use it on list no property of their own: environment
variables by a pattern, a recipe's ingredients by name, a workflow's events
from an enum, label names of at most so many characters, any name but a few
reserved ones. There `{"propertyNames": {"pattern": P}, "additionalProperties":
S}` takes exactly the keys and values `{"patternProperties": {P: S},
"additionalProperties": false}` does; a length is the pattern of that many
characters; names from an `enum` or a `const` are the object's only optional
properties, each of schema S; and names refused by a `not` of listed names are
properties of schema `false` (which llguidance holds: no such key is written).
Only such objects are rewritten; any other keeps llguidance's warning.
"""

from __future__ import annotations

from typing import Any

from .schema_keywords import ANNOTATIONS, refers_from_root, resolved, rewritten_bottom_up

# An object that says no more than these of its keys is a map whose names `propertyNames` alone decides.
_MAP_KEYS = {"type", "propertyNames", "additionalProperties", "minProperties", "maxProperties", "required", "$defs",
             "definitions", "$schema"} | ANNOTATIONS
_NAME_KEYS = {"type", "pattern", "enum", "const", "minLength", "maxLength", "not"} | ANNOTATIONS  # what names may say
_LONGEST_COUNTED_NAME = 256  # a maxLength above it is left to llguidance's warning (a regex counting that far)


def property_names_as_keys(schema: Any) -> Any:
    """`schema` with each map's `propertyNames` (a pattern, a length, listed names, and names refused by a `not` of
    listed ones) written as keys llguidance holds (a new schema; the input untouched). A schema under which a `$ref`
    might not name what it names from the root (a nested `$id`) is returned as it is."""
    if not refers_from_root(schema):
        return schema
    root = schema

    def change(node: dict[str, Any]) -> dict[str, Any]:
        names = resolved(node.get("propertyNames"), root)
        if "propertyNames" not in node or not node.keys() <= _MAP_KEYS:
            return node
        keys = _keys_schema(names, node.get("additionalProperties", True))
        if keys is None:
            return node
        rest = {key: value for key, value in node.items() if key not in ("propertyNames", "additionalProperties")}
        return rest | keys

    return rewritten_bottom_up(schema, change)


def _keys_schema(names: Any, values: Any) -> dict[str, Any] | None:
    """The keywords that take the keys `names` takes, each with a value of schema `values`; None where `names`
    says of a key more than one of a pattern, a length and listed names (besides a `not` of listed names), or
    anything else."""
    if not (isinstance(names, dict) and names.keys() <= _NAME_KEYS and names.get("type", "string") == "string"):
        return None
    refused = _refused(names.get("not"))
    ways = [keys for keys in ({"pattern"}, {"minLength", "maxLength"}, {"enum", "const"}) if names.keys() & keys]
    if refused is None or len(ways) > 1:
        return None
    none_of_them: dict[str, Any] = {"properties": {name: False for name in refused}} if refused else {}
    if names.keys() & {"enum", "const"}:
        listed = _listed(names)
        return None if listed is None else {
            "properties": {name: values for name in listed if name not in refused}, "additionalProperties": False}
    if ways:
        pattern = names["pattern"] if "pattern" in names else _length_pattern(names)
        return {**none_of_them, "patternProperties": {pattern: values}, "additionalProperties": False} \
            if isinstance(pattern, str) else None
    return {**none_of_them, "additionalProperties": values}  # (names otherwise open: any key but the refused)


def _refused(refusal: Any) -> list[str] | None:
    """The names a `not` of listed names refuses ([] where there is no `not`); None for any other `not`."""
    if refusal is None:
        return []
    if not isinstance(refusal, dict) or not refusal.keys() - ANNOTATIONS <= {"enum", "const"}:
        return None
    return _listed(refusal)


def _listed(names: dict[str, Any]) -> list[str] | None:
    """The string names of a `const` or an `enum` (not both); None for neither, both, or an enum that is no list."""
    if ("const" in names) == ("enum" in names):
        return None
    listed = [names["const"]] if "const" in names else names["enum"]
    return [name for name in listed if isinstance(name, str)] if isinstance(listed, list) else None


def _length_pattern(names: dict[str, Any]) -> str | None:
    """A pattern of any name of between minLength and maxLength characters; None for lengths that are no counts or
    a maxLength too long to count."""
    shortest, longest = names.get("minLength", 0), names.get("maxLength")
    counts = (shortest,) if longest is None else (shortest, longest)
    if any(not isinstance(count, int) or isinstance(count, bool) or count < 0 for count in counts):
        return None
    if longest is not None and (longest > _LONGEST_COUNTED_NAME or longest < shortest):
        return None
    return f"^[\\s\\S]{{{shortest},{'' if longest is None else longest}}}$"

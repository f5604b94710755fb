"""A `oneOf` whose branches no value can satisfy two of at once, written as the `anyOf` it then equals.

llguidance holds every `oneOf` as an `anyOf`, and warns that a value might then
match two branches. Where the branches exclude each other, the two are the same
and the warning is not true: branches of different JSON types (a string or a
number; an object or `null`), or objects told apart by a property both require
whose listed values (`const`, `enum`) have none in common (GeoJSON's `"type":
"Point"` or `"LineString"`, a tool call's `"tool": "send_email"`). Branches are
read through local `$ref`s, which llguidance does not follow to tell them apart.
Anything a branch says besides only narrows it, so it stays apart from the others.

A `oneOf` of branches that only ask which properties are present (`{"required":
["image"]}`, `{"required": ["build"]}`, `{"required": ["composeFile",
"service"]}`: exactly one way to start a dev container) is written as the
`anyOf` of the ways exactly one holds: its names present and, of each other
branch, one name it does not ask absent (a property of schema `false`, which
llguidance holds), at most PRESENCE_WAYS_LIMIT ways; and the value an object
(any other satisfies every branch's `required`, so more than one).
"""

from __future__ import annotations

import itertools
from typing import Any

from .schema_keywords import ANNOTATIONS, json_identity, json_types, refers_from_root, resolved, rewritten_bottom_up

PRESENCE_WAYS_LIMIT = 32  # a `oneOf` of presence-only branches whose ways are more is left to llguidance's warning
_UNION_DEPTH_LIMIT = 8  # unions inside unions read this deep (deeper: every type)
_ALL_TYPES = frozenset({"object", "array", "string", "number", "boolean", "null"})


def exclusive_one_of_as_any_of(schema: Any) -> Any:
    """`schema` with each `oneOf` whose branches exclude each other written as an `anyOf` (a new schema; the
    input untouched). A schema under which a `$ref` might not name what it names from the root (a nested `$id`)
    is returned as it is."""
    if not refers_from_root(schema):
        return schema
    root = schema

    def change(node: dict[str, Any]) -> dict[str, Any]:
        branches = node.get("oneOf")
        if "anyOf" in node or not isinstance(branches, list) or len(branches) < 2:
            return node
        resolved_branches = [resolved(branch, root) for branch in branches]
        if all(_exclusive(one, other, root) for one, other in itertools.combinations(resolved_branches, 2)):
            return {("anyOf" if key == "oneOf" else key): value for key, value in node.items()}
        ways = _ways_one_is_present(resolved_branches)
        if ways is None or not _may_be_an_object(node):
            return node
        # (an object: any other value satisfies every branch's `required`, so two or more of them)
        return {("anyOf" if key == "oneOf" else key): (ways if key == "oneOf" else value)
                for key, value in node.items()} | {"type": "object"}

    return rewritten_bottom_up(schema, change)


def _ways_one_is_present(branches: list[Any]) -> list[dict[str, Any]] | None:
    """Branches that each ask only for properties to be present, as the ways exactly one of them holds (see the
    module's docstring); None for any other branches, or too many ways. A branch that holds wherever another does
    (it asks for more) has no way of its own."""
    asked = []
    for branch in branches:
        names = branch.get("required") if isinstance(branch, dict) and branch.keys() - ANNOTATIONS == {"required"} \
            else None
        if not (isinstance(names, list) and names and all(isinstance(name, str) for name in names)):
            return None
        asked.append(list(dict.fromkeys(names)))
    ways: list[dict[str, Any]] = []
    for index, names in enumerate(asked):
        not_asked = [[name for name in other if name not in names] for other in asked[:index] + asked[index + 1:]]
        written: set[frozenset[str]] = set()
        for absent in itertools.product(*not_asked):  # (none where another branch asks no more than this one)
            absent_names = frozenset(absent)
            if absent_names in written:
                continue
            written.add(absent_names)
            ways.append({"required": names, "properties": dict.fromkeys(absent, False)})
            if len(ways) > PRESENCE_WAYS_LIMIT:
                return None
    return ways or None


def _may_be_an_object(node: dict[str, Any]) -> bool:
    """Whether `node`'s own `type` (if any) takes objects."""
    kinds = node.get("type", "object")
    return kinds == "object" or (isinstance(kinds, list) and "object" in kinds)


def _exclusive(one: Any, other: Any, root: Any) -> bool:
    """Whether no value satisfies both `one` and `other`: of no JSON type both take, or objects only, told apart by
    a property both require (see `_told_apart`)."""
    common = _types(one, root) & _types(other, root)
    return not common or (common == {"object"} and _told_apart(one, other, root))


def _told_apart(one: Any, other: Any, root: Any) -> bool:
    """Whether a property required by both objects has listed values in one that the other lists none of
    (a branch `true` takes every object: it tells none apart)."""
    if not isinstance(one, dict) or not isinstance(other, dict):
        return False
    for name in _required(one) & _required(other):
        ours, theirs = _listed(_property(one, name, root)), _listed(_property(other, name, root))
        if ours is not None and theirs is not None and not ours & theirs:
            return True
    return False


def _types(schema: Any, root: Any, depth: int = 0, seen: dict[int, frozenset[str]] | None = None) -> frozenset[str]:
    """The JSON types a branch may take (integers counted as numbers), as far as its `type`, `const` or `enum`
    say, or else those of its `anyOf`'s or `oneOf`'s branches (an ESLint rule's severity, a number or a string,
    beside an array); every type where they do not (or where it is not a schema llguidance reads)."""
    seen = {} if seen is None else seen  # (each union read once: a wide union of `$ref`s to itself took minutes)
    if schema is False:
        return frozenset()
    if not isinstance(schema, dict):
        return _ALL_TYPES
    kinds = schema.get("type")
    if isinstance(kinds, str):
        kinds = [kinds]
    if isinstance(kinds, list) and all(isinstance(kind, str) for kind in kinds):
        return frozenset("number" if kind == "integer" else kind for kind in kinds) & _ALL_TYPES
    listed = _listed(schema)
    if listed is not None:
        values = schema["enum"] if "enum" in schema else [schema["const"]]
        return frozenset().union(*(json_types(value) for value in values)) - {"integer"}
    branches = schema.get("anyOf", schema.get("oneOf"))
    if isinstance(branches, list) and branches and depth < _UNION_DEPTH_LIMIT:
        if id(schema) in seen:  # (read already, or being read: a `$ref` cycle, every type)
            return seen[id(schema)]
        seen[id(schema)] = _ALL_TYPES
        seen[id(schema)] = frozenset().union(*(_types(resolved(branch, root), root, depth + 1, seen)
                                                for branch in branches))
        return seen[id(schema)]
    return _ALL_TYPES


def _listed(schema: Any) -> frozenset[str] | None:
    """The values a schema lists (its `const`, or its `enum`), by JSON identity; None where it lists none."""
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return frozenset([json_identity(schema["const"])])
    values = schema.get("enum")
    return frozenset(json_identity(value) for value in values) if isinstance(values, list) else None


def _required(schema: dict[str, Any]) -> set[str]:
    names = schema.get("required")
    return {name for name in names if isinstance(name, str)} if isinstance(names, list) else set()


def _property(schema: dict[str, Any], name: str, root: Any) -> Any:
    properties = schema.get("properties")
    return resolved(properties.get(name), root) if isinstance(properties, dict) else None

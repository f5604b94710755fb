"""Recursive definitions written out to a bounded depth.

A schema whose definition refers to itself (a tree's `node` whose `children` are nodes, a comment whose
`replies` are comments, a root that refers to `#`) lets JSON nest without end, and a small model does: on a
held-out family-tree schema the demo target wrote Ana, Ben, Cleo, Dan, Ben, Cleo, … one inside the other
until max_tokens, at both temperatures. Every definition on a cycle of local references is written out
level by level, RECURSION_LEVELS rounds of its cycle (a cycle through two definitions, a section whose body
holds sections, takes two levels a round; a shorter cycle among them then gets more rounds): a reference
along the cycle from level k names level k + 1, and from the last level it is `false`, so what could only be
written deeper cannot be written at all (an optional `children` is left out or empty; a value with another
branch takes it). A reference from outside the cycle, another cycle's included, names its level 1. A
document that goes round each cycle at most RECURSION_LEVELS times validates as before; the last level is a
definition with its recursion taken out, so no branch that ends is lost. A reference into the schema
(`#/properties/child`) is followed as one to a definition is. A level that then takes nothing (a required
property that could only go deeper) is `false` where it is named, so what holds it takes nothing in turn: where
the root does, no document of the schema ends at all.
"""

from __future__ import annotations

from typing import Any, Callable

from .schema_keywords import (
    is_count, pointed, pointer_escaped, rewritten_bottom_up, schemas_in, with_subschemas_changed,
)

RECURSION_LEVELS = 6  # (as deep as `--format json`'s values nest: JSON_DEPTH_LIMIT)
MOST_LEVEL_DEFINITIONS = 600  # definitions written out for the levels, at most (else left as written)
LEVEL_PREFIX = "localspec_level"
_DEFINITION_MAPS = ("$defs", "definitions")
_ROOT = "#"
_NOT_THE_ROOTS_BODY = {*_DEFINITION_MAPS, "$schema"}


def recursion_bounded(schema: Any) -> Any:
    """`schema` with its recursive definitions written out RECURSION_LEVELS deep (see the module's docstring):
    a new schema, the input untouched; the input itself where nothing recurs, or where the levels cannot be
    named from its root (an `$id`, a reference to what is not in the schema, definitions already named like the
    levels) or would be too many; False where no document of it ends (every way on refers to itself again)."""
    if not isinstance(schema, dict) or any("$id" in node for node in schemas_in(schema)):
        return schema
    bodies = _definitions(schema)
    defs = schema.get("$defs", {})
    if (not isinstance(defs, dict) or any(name.startswith(LEVEL_PREFIX) for name in defs)
            or not _references(schema) <= bodies.keys()):  # (a pointer into a definition, an anchor, a URL)
        return schema
    references = {pointer: _references(body) for pointer, body in bodies.items()}
    reachable = {pointer: _reachable(pointer, references) for pointer in bodies}
    recurring = sorted(pointer for pointer in bodies if pointer in reachable[pointer])
    # Each definition's cycle: those it reaches that reach it. A round of a cycle through n definitions takes n
    # references, so a cycle has n * RECURSION_LEVELS levels; a reference into another cycle starts at its level 1.
    cycles = {pointer: {other for other in reachable[pointer] if pointer in reachable[other]} for pointer in recurring}
    deepest = {pointer: RECURSION_LEVELS * len(cycle) for pointer, cycle in cycles.items()}
    if not recurring or sum(deepest.values()) > MOST_LEVEL_DEFINITIONS:
        return schema

    def level_name(pointer: str, depth: int) -> str:
        return f"{LEVEL_PREFIX}{depth}_{recurring.index(pointer)}"

    def level(pointer: str, depth: int) -> Any:
        return {"$ref": f"#/$defs/{level_name(pointer, depth)}"}

    levels: dict[str, Any] = {}

    def reached(pointer: str, depth: int) -> Any:
        """A reference to `pointer`'s level `depth`; False where none is left there (past the last, or a level
        that is itself `false`: llguidance takes `false` as a property's schema, not as a definition)."""
        name = level_name(pointer, depth)
        return False if depth > deepest[pointer] or levels.get(name) is False else level(pointer, depth)

    def outside(pointer: str) -> Any:
        return reached(pointer, 1)

    def from_level(pointer: str, depth: int) -> Callable[[str], Any]:
        """Where a reference from `pointer`'s level `depth` leads: one level down its cycle (none past the last),
        or another cycle's first."""
        return lambda to: reached(to, 1) if to not in cycles[pointer] else reached(to, depth + 1)

    # (deepest first, so that a level knows which below it are `false`; again until no more are, as a reference
    # into another cycle may be written before that cycle's first level is)
    while True:
        false_before = {name for name, body in levels.items() if body is False}
        for depth in range(max(deepest.values()), 0, -1):
            for pointer in recurring:
                if depth <= deepest[pointer]:
                    levels[level_name(pointer, depth)] = _collapsed(_pointing(bodies[pointer], recurring,
                                                                              from_level(pointer, depth)))
        if {name for name, body in levels.items() if body is False} == false_before:
            break
    # The root's body refers to level 1; where it is on a cycle itself, its body is a level and the root refers to it.
    body = outside(_ROOT) if _ROOT in recurring else _collapsed(_pointing(bodies[_ROOT], recurring, outside))
    if body is False:  # (every document would nest without end)
        return False
    bounded = {**{key: value for key, value in schema.items() if key == "$schema"}, **body}
    for key in _DEFINITION_MAPS:  # (the recurring ones kept as written, unused)
        if isinstance(schema.get(key), dict):
            bounded[key] = {name: _pointing(body, recurring, outside) for name, body in schema[key].items()}
    written = {name: body for name, body in levels.items() if body is not False}
    bounded["$defs"] = {**bounded.get("$defs", {}), **written}
    return bounded


def _collapsed(schema: Any) -> Any:
    """`schema` with each part that takes no value (as far as `_takes_nothing` tells) written `false`: a property
    nothing can fill then goes unwritten where it may, and llguidance is never given a definition that takes nothing
    (it refuses the whole schema for one, reached or not)."""
    return rewritten_bottom_up(schema, lambda node: False if _takes_nothing(node) else node)


def _takes_nothing(node: dict[str, Any]) -> bool:
    """Whether no value satisfies `node` for a part of it that takes nothing: a required property's, the first
    items' that `minItems` asks for, an `allOf` part's, or every branch of an `anyOf` or `oneOf`."""
    properties = node.get("properties") if isinstance(node.get("properties"), dict) else {}
    required = node.get("required") if isinstance(node.get("required"), list) else []
    if any(isinstance(name, str) and properties.get(name) is False for name in required):
        return True
    least = node["minItems"] if is_count(node.get("minItems")) else 0
    prefix = node.get("prefixItems") if isinstance(node.get("prefixItems"), list) else []
    if False in prefix[:least] or (node.get("items") is False and least > len(prefix)):
        return True
    if isinstance(node.get("allOf"), list) and False in node["allOf"]:
        return True
    return any(isinstance(node.get(key), list) and node[key] and all(part is False for part in node[key])
               for key in ("anyOf", "oneOf"))


def _definitions(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema's definitions by the `$ref` that names them (`#/$defs/name`; `#` for the root's body), and the
    schemas inside it that a reference points to (`#/properties/child`)."""
    bodies = {f"#/{key}/{pointer_escaped(name)}": body for key in _DEFINITION_MAPS
              if isinstance(schema.get(key), dict) for name, body in schema[key].items()}
    bodies[_ROOT] = {key: value for key, value in schema.items() if key not in _NOT_THE_ROOTS_BODY}
    for pointer in _references(schema) - bodies.keys():
        target = pointed(schema, pointer)
        if isinstance(target, (dict, bool)):
            bodies[pointer] = target
    return bodies


def _references(schema: Any) -> set[str]:
    """Every `$ref` in `schema`, at any depth."""
    return {node["$ref"] for node in schemas_in(schema) if isinstance(node.get("$ref"), str)}


def _reachable(start: str, references: dict[str, set[str]]) -> set[str]:
    """The definitions reached from `start` by one reference or more."""
    seen: set[str] = set()
    to_visit = list(references[start])
    while to_visit:
        pointer = to_visit.pop()
        if pointer not in seen:
            seen.add(pointer)
            to_visit += references[pointer]
    return seen


def _pointing(schema: Any, recurring: list[str], target: Callable[[str], Any]) -> Any:
    """`schema` with each reference to a recurring definition replaced by `target(its pointer)` (a schema; False
    takes the whole schema that held the reference)."""
    if isinstance(schema, list):
        return [_pointing(item, recurring, target) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if schema.get("$ref") in recurring:
        replacement = target(schema["$ref"])
        if replacement is False:
            return False
        schema = {**schema, **replacement}
    return with_subschemas_changed(schema, lambda subschema: _pointing(subschema, recurring, target))

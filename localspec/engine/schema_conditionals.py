"""JSON Schema's conditionals written as branches llguidance holds to.

llguidance does not implement `if`/`then`/`else`, `dependentRequired`, `dependentSchemas` or draft 7's
`dependencies`: it warns that it ignores them, and a model then leaves out the field a choice asks for
(`"method": "card"` without the card's number; `"prefers": "email"` without the phone its schema's
`dependentRequired` asks for, on held-out schemas). It does implement `anyOf`, `allOf`, `required` and
`false` as a property's schema, and each conditional is an `anyOf` of its cases:

    dependentRequired {a: [b, c]}   anyOf [{properties: {a: false}}, {required: [a, b, c]}]
    dependentSchemas {a: S}         anyOf [{properties: {a: false}}, allOf [{required: [a]}, S]]
    if I then T else E              anyOf [allOf [I, T], allOf [not I, E]]

`not I` (llguidance does not implement `not` either) is written out where `I` asks only that properties
be present (`required`), hold listed values (`const`, `enum`) whose alternatives the object's own schema
lists (its `enum` or `const`, or `type: boolean`), or hold numbers in a range (`minimum`, `maximum`,
`exclusiveMinimum`, `exclusiveMaximum`): I fails where one of its required properties is missing, where
one of its properties is present with a value it does not list, or with a number below or above its
range (a value that is no number passes a range; only ranges whose bounds llguidance and a validator read
alike: see _EXACT_BOUND). A `type` in I is written out where the schema it applies to holds it already (an
`integer` property asked to be an `integer` or a `number`); a property's condition may ask the same of its
own properties (it fails where the property is present and fails it); local `$ref`s are followed where no
nested `$id` changes what they name. A `then`, an `else` or a dependency's schema of `not: C` (often
`not: {required: [x]}`, "no x then") is written as the ways C fails, the same way, and so is an
object's own `not: C` (of a value's own listed values or type: schema_not.py). Elsewhere,
and where the cases would multiply past MOST_CASES, the conditional stays as written (with llguidance's
warning). The branches are exact: they let through what the schema validates, no more and no less.
"""

from __future__ import annotations

import math
from typing import Any

from .schema_keywords import (
    ANNOTATIONS, CASES_COMMENT, json_identity, json_types, refers_from_root, refers_into, resolved, rewritten_bottom_up,
    schemas_in,
)

# The cases of one schema's conditionals multiply where llguidance writes the object (2 per dependency, 2 or
# more per `if`): with 64 (six dependencies) it compiles in 30 ms and writes an object no slower than with one
# case (measured over bytes); beyond that the conditionals are left as written, with llguidance's warning.
MOST_CASES = 64
# A range's bounds, each with the bound a number fails it by: below `minimum` (exclusiveMaximum), and so on.
_OPPOSITE_BOUNDS = {"minimum": "exclusiveMaximum", "exclusiveMinimum": "maximum", "maximum": "exclusiveMinimum",
                    "exclusiveMaximum": "minimum"}
_CONDITION_KEYS = {"properties", "required", "type"} | _OPPOSITE_BOUNDS.keys() | ANNOTATIONS
# Cases of these keywords alone only narrow values (presence, listed values, ranges): where a value goes is still told
# by its object's own keywords.
_PLAIN_CASE_KEYS = {"properties", "required", "type", "enum", "const", "allOf", "anyOf"} | _OPPOSITE_BOUNDS.keys() | \
    ANNOTATIONS
_ABSENT = False  # a property's schema that no value satisfies: the property cannot be present


def conditionals_as_branches(schema: Any) -> Any:
    """`schema` with every conditional it holds, at any depth, written as `anyOf` branches where that can be
    done exactly (see the module's docstring): a new schema, the input untouched."""
    root = schema if refers_from_root(schema) else None  # ($refs are followed only where they name the root's)
    own_nots = not refers_into(schema, "not")  # (an object's own `not` is taken away: not where a ref names it)
    return rewritten_bottom_up(schema, lambda node: _branched(node, root, own_nots))


def _branched(node: dict[str, Any], root: Any, own_nots: bool) -> dict[str, Any]:
    """`node` with its own conditionals as an `allOf` of `anyOf`s, those that can be written so."""
    cases: list[list[Any]] = []
    written: set[str] = set()
    dependencies = [(key, node.get(key)) for key in ("dependentRequired", "dependentSchemas", "dependencies")]
    for key, value in dependencies:
        branches = _dependency_cases(key, value, node, root) if isinstance(value, dict) else None
        if branches is not None:
            cases += branches
            written.add(key)
    if "if" in node and ("then" in node or "else" in node):
        branches = _if_cases(node, root)
        if branches is not None:
            cases.append(branches)
            written |= {"if", "then", "else"}
    if "not" in node and own_nots:  # (a `not` of properties: `not: {required: [x]}` beside the object's keywords)
        failing = ways_to_fail(node["not"], node, root)
        if failing is not None:
            cases.append(failing)
            written.add("not")
    if "if" in node and "then" not in node and "else" not in node:
        written.add("if")  # (a condition that brings nothing)
    if (not written or any(not branches for branches in cases)  # (a conditional no value satisfies: as written)
            or math.prod(len(branches) for branches in cases) > MOST_CASES):
        return node
    kept = {key: value for key, value in node.items() if key not in written}
    earlier = kept.get("allOf", [])
    if not isinstance(earlier, list):
        return node  # (a malformed allOf: llguidance reports it)
    return {**kept, "allOf": [*earlier, *(_any_of(branches) for branches in cases)]} if cases else kept


def _any_of(branches: list[Any]) -> dict[str, Any]:
    """An `anyOf` of a conditional's cases, marked (CASES_COMMENT) where they ask only which properties are present
    and which listed values they hold, so that what follows the JSON written (schema_places.py) can still place
    values by their object's own keywords."""
    plain = all(node.keys() <= _PLAIN_CASE_KEYS for node in schemas_in(branches))
    return {"$comment": CASES_COMMENT, "anyOf": branches} if plain else {"anyOf": branches}


def _dependency_cases(key: str, dependencies: dict[str, Any], node: dict[str, Any],
                      root: Any) -> list[list[Any]] | None:
    """For each property that brings a dependency (`key`: dependentRequired, dependentSchemas or dependencies),
    the two cases: absent, or present with what it brings (more required names, or a schema). None where a
    dependency is malformed (llguidance reports it)."""
    cases = []
    for name, needs in dependencies.items():
        if isinstance(needs, list) and key != "dependentSchemas":
            if not all(isinstance(need, str) for need in needs):
                return None
            present: Any = {"required": [name, *needs]}
        elif isinstance(needs, (dict, bool)) and key != "dependentRequired":
            present = both({"required": [name]}, _without_not(needs, node, root))
        else:
            return None
        cases.append([branch for branch in ({"properties": {name: _ABSENT}}, present) if branch is not False])
    return cases


def _if_cases(node: dict[str, Any], root: Any) -> list[Any] | None:
    """The cases of `node`'s `if`/`then`/`else`: the condition holds and `then` applies, or it fails (one case
    per way it can fail) and `else` applies. None where its failing cannot be written (see the docstring)."""
    condition = node["if"]
    then, otherwise = (_without_not(node.get(key, True), node, root) for key in ("then", "else"))
    if condition is True or condition is False:
        branches = [then if condition else otherwise]
    else:
        failing = ways_to_fail(condition, node, root)
        if failing is None:
            return None
        branches = [both(condition, then), *(both(way, otherwise) for way in failing)]
    return [branch for branch in branches if branch is not False]


def _without_not(part: Any, node: dict[str, Any], root: Any) -> Any:
    """`part` (a `then`, an `else`, a dependency's schema: of `node`'s own values) with its `not` written as the
    ways its schema fails (`not: {required: [x]}`, "no x", is common there, and llguidance does not implement
    `not`); `part` itself where they cannot be written."""
    if not isinstance(part, dict) or "not" not in part:
        return part
    failing = ways_to_fail(part["not"], node, root)
    if failing is None:
        return part
    rest = {key: value for key, value in part.items() if key != "not"}
    return both(rest or True, {"anyOf": failing} if failing else False)


def ways_to_fail(condition: Any, node: Any, root: Any = None, depth: int = 0) -> list[dict[str, Any]] | None:
    """Schemas whose union is exactly the values of `node` that fail `condition`, where it asks only for
    required properties, listed values of properties and ranges, and the same of properties' own values (see
    the module's docstring); None elsewhere. Local `$ref`s are followed in `root`; a `node` that is an `anyOf` or a
    `oneOf` of branches (a DNS record of five kinds told apart by a `const`) fails where a branch's value fails
    (each way beside its branch)."""
    node = resolved(node, root)
    if not isinstance(condition, dict) or not condition.keys() <= _CONDITION_KEYS or not isinstance(node, dict):
        return None
    union = _union_of(node)
    if union is not None:  # (values of branches: those of each branch that fail, `depth` unions deep at most)
        branches = [resolved(branch, root) for branch in union]
        failing = [ways_to_fail(condition, branch, root, depth + 1) if depth < _UNION_DEPTH else None
                   for branch in branches]
        if any(ways is None for ways in failing):
            return None
        return [way for branch, ways in zip(branches, failing) for way in (both(branch, each) for each in ways)
                if way is not False]
    properties, required = condition.get("properties", {}), condition.get("required", [])
    if not isinstance(properties, dict) or not (isinstance(required, list)
                                                and all(isinstance(name, str) for name in required)):
        return None
    if "type" in condition and not _type_holds(condition["type"], node):
        return None  # (a value of another type fails a type: not written out)
    out_of_range = _out_of_range(condition, node) if condition.keys() & _OPPOSITE_BOUNDS else []
    if out_of_range is None:
        return None
    ways: list[dict[str, Any]] = [{"type": "object", "properties": {name: _ABSENT}} for name in required]
    ways += out_of_range
    for name, wanted in properties.items():
        way = _other_value(name, wanted, node, root)
        if way is None:
            return None
        ways += way
    return ways


_UNION_DEPTH = 4  # (unions inside unions followed so deep at most: a $ref may lead back to its own)


def _union_of(node: dict[str, Any]) -> list[Any] | None:
    """The branches of a `node` that is an `anyOf` or a `oneOf` alone (annotations and `type` beside it), else
    None."""
    keys = node.keys() & {"anyOf", "oneOf"}
    if len(keys) != 1 or not node.keys() - keys <= {"type"} | ANNOTATIONS:
        return None
    branches = node[min(keys)]
    return branches if isinstance(branches, list) and branches else None


def _other_value(name: str, wanted: Any, node: dict[str, Any], root: Any) -> list[dict[str, Any]] | None:
    """The ways property `name` can fail `wanted`: present, with a value of those `node` allows that `wanted`
    does not list, out of its range, or failing what `wanted` asks of an object. None where that is not written
    out (see `ways_to_fail`)."""
    if wanted is True:
        return []
    if wanted is False:
        return [{"type": "object", "required": [name]}]
    own = node.get("properties")
    value = resolved(own.get(name), root) if isinstance(own, dict) else None
    if isinstance(wanted, dict) and wanted.keys() & {"properties", "required", *_OPPOSITE_BOUNDS}:
        failing = ways_to_fail(wanted, value if isinstance(value, dict) else {}, root)
        return None if failing is None else [
            {"type": "object", "required": [name], "properties": {name: way}} for way in failing]
    listed = _values(wanted)
    allowed = _values(value, boolean_type=True)
    if listed is None or allowed is None:
        return None
    wanted_identities = {json_identity(value) for value in listed}
    rest = [value for value in allowed if json_identity(value) not in wanted_identities]
    return [{"type": "object", "required": [name], "properties": {name: {"enum": rest}}}] if rest else []


# A number as JSON writes it is compared with a bound exactly by llguidance, as the float it parses to by a
# validator: the two agree on every number the bounds in grammar.py let through (15 whole digits, 9 after the
# point) only near bounds below this (15 significant digits) that themselves have at most 15 significant digits,
# or near an integer bound below 2**53 where the value is an integer too. Past them a range's failing, written
# out, would let through what a validator reads as within it (a price of 99999999.999999999 is 1e8 to it; 1 is
# above 0.9999999999999999 to it, not to llguidance): such a range is not written out.
_EXACT_BOUND = 10**6
_EXACT_INTEGER = 2**53


def _out_of_range(condition: dict[str, Any], schema: Any) -> list[dict[str, Any]] | None:
    """The numbers that fail `condition`'s range, one schema per bound, for values of `schema`; None where a bound
    is not a number, or is one whose failing cannot be written exactly (see _EXACT_BOUND)."""
    integral = _type_holds("integer", schema)
    ways = []
    for bound, opposite in _OPPOSITE_BOUNDS.items():
        if bound in condition:
            limit = condition[bound]
            if not exact_bound(limit, integral):
                return None
            ways.append({"type": "number", opposite: limit})
    return ways


def exact_bound(limit: Any, integral: bool) -> bool:
    """Whether `limit` is a number that llguidance and a validator compare values with alike (see _EXACT_BOUND),
    for values that are integers where `integral`."""
    if isinstance(limit, bool) or not isinstance(limit, (int, float)):
        return False
    if not (abs(limit) < _EXACT_BOUND or (integral and abs(limit) < _EXACT_INTEGER)):
        return False  # (10**400 too: `math.isfinite` would raise OverflowError on it)
    return not (isinstance(limit, float) and float(f"{limit:.15g}") != limit)  # (0.9999999999999999: 1 to llguidance)


def _type_holds(kind: Any, schema: Any) -> bool:
    """Whether every value `schema` allows is of JSON type `kind`: its own `type` is that one (or `integer`, where
    `kind` is `number`)."""
    own = schema.get("type") if isinstance(schema, dict) else None
    return isinstance(kind, str) and isinstance(own, str) and (own == kind or (kind, own) == ("number", "integer"))


def _values(schema: Any, boolean_type: bool = False) -> list[Any] | None:
    """The values a schema lists (`const`, `enum`; `type: boolean` where `boolean_type`), else None."""
    if not isinstance(schema, dict) or {"const", "enum"} <= schema.keys():
        return None  # (both: what each lists, and the other does not, would have to be left out)
    if "const" in schema:
        values: list[Any] = [schema["const"]]
    elif isinstance(schema.get("enum"), list):
        values = schema["enum"]
    elif boolean_type and schema.get("type") == "boolean":
        values = [True, False]
    else:
        return None
    if boolean_type:
        return values  # (what else the object's own schema asks of the property, it still asks beside the branch)
    if not schema.keys() <= {"const", "enum", "type"} | ANNOTATIONS:
        return None
    kinds = schema.get("type", [])
    kinds = {kinds} if isinstance(kinds, str) else set(kinds) if isinstance(kinds, list) else None
    if kinds is None:
        return None
    return [value for value in values if not kinds or json_types(value) & kinds]


def both(first: Any, second: Any) -> Any:
    """A schema of the values both satisfy (booleans as JSON Schema reads them: True anything, False nothing)."""
    if first is False or second is False:
        return False
    if first is True:
        return second
    if second is True:
        return first
    return {"allOf": [first, second]}

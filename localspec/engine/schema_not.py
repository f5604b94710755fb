"""A value's `not` of listed values or of types, written as what it leaves.

llguidance does not implement `not` (it warns, and takes what the `not` refuses).
Real schemas mostly say with it that a value is not one of a few: a name that is
not empty (`"not": {"const": ""}`), a user name that is not `root` or `admin`
(`"not": {"enum": [...]}`), a value that is not `null` (`"not": {"type":
"null"}`). What such a `not` leaves is a union of schemas llguidance holds, one
a JSON type:

    strings but ""                      minLength 1
    strings but the listed ones         a pattern: any string that leaves the listed ones' common start
                                        (where none holds a quote or a backslash)
    numbers but one                     below it or above it (only a number that llguidance and a
                                        validator read alike: see exact_bound)
    booleans but the listed ones        the other one
    a type refused                      the other types

Where a single one is left for the value's own type, it is written into the
value's schema (its pattern, its minLength, its type), so that the value stays
what the other rewrites and the unique-items rule read (a string by a pattern);
an `enum` of the value's own loses the refused values; else the union goes
beside it, as an `anyOf`. A `not` of properties (`required`, a property's listed
values) is a conditional's (schema_conditionals.py); any other `not` (of an
object or array value, of integers among numbers, of a pattern) keeps
llguidance's warning.
"""

from __future__ import annotations

from typing import Any

from .schema_conditionals import exact_bound
from .schema_keywords import (ANNOTATIONS, BOUND_KEYWORDS, finite_number, json_identity, json_types, listed_values,
                              refers_into, rewritten_bottom_up, with_bounds)

_TYPES = ("object", "array", "string", "number", "boolean", "null")
_REFUSING_KEYS = {"type", "const", "enum"} | ANNOTATIONS  # what a `not` written out here may say
# Where an untyped value's values are given elsewhere (see _into_branches).
_VALUES_ELSEWHERE = {"anyOf", "oneOf", "allOf", "$ref", "if", "then", "else", "dependentSchemas"}
_REGEX_SPECIAL = set("\\.+*?()|[]{}^$#&-~")  # (escaped alike for Python's re and llguidance's regexes)


def not_written_out(schema: Any) -> Any:
    """`schema` with each `not` of listed values or of types written as what it leaves (a new schema; the input
    untouched); any other `not` as it is. A schema one of whose `$ref`s points into a `not` is returned as it is."""
    return schema if refers_into(schema, "not") else rewritten_bottom_up(schema, _without_not)


def _without_not(node: dict[str, Any]) -> dict[str, Any] | bool:
    refused = node.get("not")
    if refused is True or isinstance(refused, dict) and not refused.keys() - ANNOTATIONS:
        return False  # (a `not` of every value: no value at all, which llguidance holds as it holds `false`)
    if not isinstance(refused, dict) or not refused.keys() <= _REFUSING_KEYS:
        return node
    if refused.keys() & {"const", "enum"} and listed_values(refused) is None:
        return node  # (both, or an enum that is no list: llguidance reports what it makes of it)
    rest = {key: value for key, value in node.items() if key != "not"}
    own_values = listed_values(rest)
    if own_values is not None:  # (an enum of the value's own: the refused values left out of it)
        kept = [value for value in own_values if not _refuses(refused, value)]
        return {key: value for key, value in rest.items() if key not in ("const", "enum")} | {"enum": kept} \
            if kept else node  # (none left: as written, as below)
    if rest.keys() & _VALUES_ELSEWHERE and "type" not in rest:
        return _into_branches(rest, refused)
    own_types = _types(rest.get("type", list(_TYPES)))
    left = _ways_left(refused, own_types) if own_types is not None else None
    if left == []:  # (every value of its types refused: no value at all)
        return False
    if not left:
        return node
    if len(left) == 1:
        merged = _merged(rest, left[0])
        if merged is not None:
            return merged
    earlier = rest.get("allOf", [])
    if not isinstance(earlier, list):
        return node
    return {**rest, "allOf": [*earlier, {"anyOf": [_within_bounds_of(rest, way) for way in left]}]}


def _within_bounds_of(schema: dict[str, Any], way: dict[str, Any]) -> dict[str, Any]:
    """`way`, a number's range on one side of a refused value, with `schema`'s own bounds in it too (the same
    values, `schema` holding them anyway), and its type where that is integers: llguidance's reading of an
    exclusive bound depends on the bound on the other side, which it must then see beside it (see
    schema_number_bounds.py)."""
    if way.get("type") != "number":
        return way
    bounded = dict(way)
    own_names = _type_names(schema.get("type")) or set()
    if "integer" in own_names and "number" not in own_names:  # (a number's range beside an integer's bound:
        bounded["type"] = "integer"                          # llguidance took `minimum: -1` as exclusive)
    return with_bounds(bounded, {key: schema[key] for key in BOUND_KEYWORDS if finite_number(schema.get(key))})


def _into_branches(schema: dict[str, Any], refused: dict[str, Any]) -> dict[str, Any]:
    """An untyped `schema` whose values an `anyOf` or a `oneOf` gives, with the `not` in each branch ((A or B) and
    not C is (A and not C) or (B and not C), and exactly one of them where exactly one of A and B); as written,
    with its `not`, where a branch's cannot be written out or the values come from elsewhere too (a `$ref`, an
    `allOf`: a type written beside them would bring the bounds localspec puts on open numbers to listed ones)."""
    keys = schema.keys() & _VALUES_ELSEWHERE
    unchanged = {**schema, "not": refused}
    if keys not in ({"anyOf"}, {"oneOf"}) or not isinstance(schema[min(keys)], list):
        return unchanged
    branches = [_without_not({**branch, "not": refused}) if isinstance(branch, dict) else branch
                for branch in schema[min(keys)]]
    if any(branch is True or isinstance(branch, dict) and "not" in branch for branch in branches):
        return unchanged
    return {**schema, min(keys): branches}


def _ways_left(refused: dict[str, Any], own_types: set[str]) -> list[dict[str, Any]] | None:
    """Schemas whose union is the values of `own_types` (JSON types, integers counted as numbers) that `refused`
    does not take; None where that is not written out here."""
    refused_names = _type_names(refused.get("type", list(_TYPES)))
    if refused_names is None or ("integer" in refused_names and "number" not in refused_names):
        return None  # (numbers but integers: not written out)
    refused_types = _types(list(refused_names))
    if refused_types is None:
        return None
    values = listed_values(refused)  # (None: a type alone, refusing all its values)
    ways: list[dict[str, Any]] = []
    for kind in _TYPES:
        if kind not in own_types:
            continue
        if kind not in refused_types:
            ways.append({"type": kind})
            continue
        if values is None:
            continue  # (every value of the kind refused)
        others = _others_of(kind, [value for value in values if kind in _types_of(value)], own_types)
        if others is None:
            return None
        ways += others
    bare = [way["type"] for way in ways if set(way) == {"type"}]
    kinds = [{"type": bare[0] if len(bare) == 1 else bare}] if bare else []
    return kinds + [way for way in ways if set(way) != {"type"}]


def _others_of(kind: str, values: list[Any], own_types: set[str]) -> list[dict[str, Any]] | None:
    """The values of JSON type `kind` but `values` (each of that type), as schemas; None where not written out."""
    if not values:
        return [{"type": kind}]
    if kind == "string":
        if {*values} == {""}:
            return [{"type": "string", "minLength": 1}]
        if any('"' in value or "\\" in value for value in values):
            return None  # (llguidance lets a string's `\\` or `\"` through a class that leaves them out: `[^\\]`)
        return [{"type": "string", "pattern": f"^{_all_strings_but(values)}$"}]
    if kind == "number":
        numbers = set(values)
        if len(numbers) > 1 or not exact_bound(values[0], integral=False):
            return None  # (between two: llguidance takes 1 in `exclusiveMinimum: 1, exclusiveMaximum: 1.5`)
        return [{"type": "number", "exclusiveMaximum": values[0]}, {"type": "number", "exclusiveMinimum": values[0]}]
    if kind == "boolean":
        return [{"const": value} for value in (False, True) if value not in values]
    if kind == "null":
        return []
    return None  # (objects and arrays listed: not written out)


def _all_strings_but(strings: list[str]) -> str:
    """A regex of every string but `strings`: at each point of their common starts, the end (where no listed
    string ends there), or a character none of them goes on with and then anything, or the way on of each."""
    trie: dict[str, Any] = {}
    for text in strings:
        node = trie
        for character in text:
            node = node.setdefault(character, {})
        node[""] = {}  # (a listed string ends here)

    def others(node: dict[str, Any]) -> str:
        nexts = sorted(key for key in node if key)
        ways = [] if "" in node else [""]
        ways.append(f"[^{''.join(_escaped(key) for key in nexts)}][\\s\\S]*" if nexts else "[\\s\\S]+")
        ways += [_escaped(key) + others(node[key]) for key in nexts]
        return "(?:" + "|".join(ways) + ")"

    return others(trie)


def _escaped(character: str) -> str:
    return "\\" + character if character in _REGEX_SPECIAL else character


def _merged(schema: dict[str, Any], way: dict[str, Any]) -> dict[str, Any] | None:
    """`schema` holding `way` itself, where it can: its `type` narrowed, or, for a string, a pattern where it has
    none or a least length; None where it cannot."""
    own_names = _type_names(schema.get("type", list(_TYPES))) or set()
    if set(way) == {"type"}:
        kept = [name for name in [*_TYPES, "integer"] if name in own_names and _types([name]) <= _types(way["type"])]
        if "number" in kept and "integer" in kept:
            kept.remove("integer")
        return {**schema, "type": kept[0] if len(kept) == 1 else kept} if kept else None
    if own_names != {"string"}:
        return None
    if way.keys() == {"type", "pattern"} and "pattern" not in schema:
        return {**schema, "pattern": way["pattern"]}
    least = schema.get("minLength", 0)
    if way.keys() == {"type", "minLength"} and isinstance(least, int) and not isinstance(least, bool):
        return {**schema, "minLength": max(least, 1)}
    return None


def _refuses(refused: dict[str, Any], value: Any) -> bool:
    """Whether `refused` (a `type`, a `const` or an `enum`) takes `value`."""
    kinds = _type_names(refused.get("type", list(_TYPES))) or set()
    if not json_types(value) & kinds:
        return False
    listed = listed_values(refused)
    return listed is None or json_identity(value) in {json_identity(each) for each in listed}


def _types(kinds: Any) -> set[str] | None:
    """JSON types as a set, integers counted as numbers; None where `kinds` names no types."""
    names = _type_names(kinds)
    if names is None or not names <= {*_TYPES, "integer"}:
        return None
    return {"number" if name == "integer" else name for name in names}


def _type_names(kinds: Any) -> set[str] | None:
    if isinstance(kinds, str):
        return {kinds}
    if isinstance(kinds, list) and all(isinstance(kind, str) for kind in kinds):
        return set(kinds)
    return None


def _types_of(value: Any) -> set[str]:
    return {"number" if kind == "integer" else kind for kind in json_types(value)}

"""`minProperties` and `maxProperties` that llguidance cannot hold, written as cases it can, or left out with a note.

llguidance holds an object's count of properties only where every property it lists is required (and a few
counts besides); elsewhere it warns, and its grammar may then take no object at all (`{"properties": {"m",
"b", "s"}, "minProperties": 2}` refused `{"m": "x", "b": true}` and every other: a generation could not close
the object). For an object closed to other keys, a count over its optional properties is a choice of which of
them are present:

    minProperties k   anyOf, over the sets S of k - |required| optional properties: {required: S}
    maxProperties k   anyOf, over the sets T of |optional| - (k - |required|) of them: {properties: {t: false}}

which is exact, up to MOST_CASES cases. Elsewhere (an object that takes other keys, too many cases) the count
is left out, and a note says so; a count no object can meet is refused or written as `false` first
(schema_counts_apart.py). Only where llguidance says it cannot hold a count (grammar.py asks it first): a count
it holds stays its own.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from .schema_keywords import CASES_COMMENT, is_count, rewritten_bottom_up

MOST_CASES = 64  # (as for conditionals: see schema_conditionals.MOST_CASES)
# And properties named in all the cases of one object, at most: llguidance's parser takes at most 2,000 items a
# row, and 23 cases of 22 properties each (maxProperties 22 of 23) left it none after the first key.
MOST_NAMED = 256
_COUNTS = ("minProperties", "maxProperties")


def property_counts_as_branches(schema: Any) -> tuple[Any, list[str]]:
    """`schema` with each property count llguidance cannot hold written as cases, or left out (see the module's
    docstring), and a note for each one left out: a new schema, the input untouched."""
    notes: list[str] = []
    return rewritten_bottom_up(schema, lambda node: _counted(node, notes)), notes


def _counted(node: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """`node` with its own property counts as cases where llguidance could not hold them."""
    counts = {key: node[key] for key in _COUNTS if is_count(node.get(key))}
    properties, required = node.get("properties"), node.get("required", [])
    if (not counts or not isinstance(properties, dict) or not isinstance(required, list)
            or not all(isinstance(name, str) and name in properties for name in required)
            or set(properties) <= set(required)):
        return node  # (nothing to count, or llguidance holds it, or reports it)
    kept = {key: value for key, value in node.items() if key not in counts}
    optional = [name for name in properties if name not in required]
    closed = node.get("additionalProperties") is False and "patternProperties" not in node
    sizes = [_how_many_cases(key, count - len(set(required)), len(optional)) for key, count in counts.items()]
    if closed and None in sizes:
        return node  # (no object can meet it: llguidance says so, as for any schema no text can satisfy)
    named = sum((size or 0) * len(optional) for size in sizes if size is not None)
    if not closed or math.prod(size or 1 for size in sizes) > MOST_CASES or named > MOST_NAMED:
        why = "the object takes other keys" if not closed else "the choices of properties number too many"
        notes += [f"{key} {count} left out ({why}; llguidance holds it only where every listed property is"
                  " required): the output may not satisfy it" for key, count in counts.items()]
        return kept
    earlier = kept.get("allOf", [])
    if not isinstance(earlier, list):
        return node
    cases = [_cases(key, count - len(set(required)), optional) for key, count in counts.items()]
    extra = [{"$comment": CASES_COMMENT, "anyOf": branches} for branches in cases if branches]
    return {**kept, "allOf": [*earlier, *extra]} if extra else kept


def _how_many_cases(key: str, beyond_required: int, optional: int) -> int | None:
    """How many cases `_cases` writes for a count (0: every object meets it), None where no object can."""
    if key == "minProperties":
        if beyond_required > optional:
            return None
        return 0 if beyond_required <= 0 else math.comb(optional, beyond_required)
    if beyond_required < 0:
        return None
    return 0 if beyond_required >= optional else math.comb(optional, beyond_required)


def _cases(key: str, beyond_required: int, optional: list[str]) -> list[dict[str, Any]]:
    """The cases of a count (`key`) that asks for `beyond_required` of the `optional` properties at least (min) or
    at most (max), where some object can meet it: none where every object does."""
    if key == "minProperties":
        if beyond_required <= 0:
            return []
        return [{"required": list(present)} for present in itertools.combinations(optional, beyond_required)]
    if beyond_required >= len(optional):
        return []
    absent = len(optional) - beyond_required  # (at least so many of them are left out)
    return [{"properties": {name: False for name in left_out}} for left_out in itertools.combinations(optional, absent)]

"""An array's `contains` written as branches llguidance holds to.

llguidance does not implement `contains`, `minContains` or `maxContains` (it warns that it ignores them),
and a model then writes an array with no item of the kind asked for (a meeting's attendees without its
chair, on a held-out schema, at both temperatures). It does implement `prefixItems`, `items`, `allOf` and
`anyOf`, and "at least m items match C" is an `anyOf` over the places of m such items:

    items I, contains C      anyOf [{prefixItems: [I, …, I, I ∧ C], items: I, minItems: i + 1}, i = 0, 1, …]
    minContains: 2           anyOf [{prefixItems: [I, …, I ∧ C, …, I ∧ C], items: I, …}, i < j, …]

and "from m to M items match C" (`maxContains`) an `anyOf` over the places of all the matching items, every
other item failing C, where that failing can be written out (C asks only for required properties or listed
values: see schema_conditionals.py). The branches name the matching and the other items by `$ref`, through
definitions added to the root, so that llguidance compiles each once; and the array's type, items and bounds
are left to the branches, which llguidance would otherwise intersect with each. Matches are looked for among
the first CONTAINS_POSITIONS items (fewer where their places would make more than CONTAINS_BRANCHES branches,
or, where the items are copied, not named, copies longer than LARGEST_COPIES): an array whose matches come
later is refused, which narrows what the grammar allows, as the bounds in grammar.py do. Other cases (a
`contains` beside `prefixItems` or `uniqueItems`, an array that may also be another type, a `maxContains`
whose failing cannot be written out, an item too large to copy even once per match) stay as written, with
llguidance's warning.
"""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

from .schema_conditionals import both, ways_to_fail
from .schema_keywords import is_count, refers_from_root, rewritten_bottom_up, takes_definitions

CONTAINS_POSITIONS = 8
CONTAINS_BRANCHES = 64  # (the places of 2 matches among 8 items make 28 branches; of 4, 70: looked for among 7)
# Where the items cannot be named (an `$id` inside), the branches copy the item's schema once per place it takes
# (36 copies for one match among 8 positions), and llguidance is handed every copy (compiling 70,000 characters
# of them takes about 0.2 s): matches are looked for among fewer places where the copies would take more
# characters of JSON than this in all (an array of arrays that each ask `contains`, whose own branches would be
# copied again).
LARGEST_COPIES = 72_000
DEFINITION_PREFIX = "localspec_contains_item"  # (the definitions of matching and other items: see `_named`)
_REF_SIZE = len(json.dumps({"$ref": f"#/$defs/{DEFINITION_PREFIX}999"}))
_CONTAINS_KEYS = {"contains", "minContains", "maxContains"}


def contains_as_branches(schema: Any) -> Any:
    """`schema` with every `contains` it holds, at any depth, written as `anyOf` branches where that can be done
    (see the module's docstring): a new schema, the input untouched. Where definitions can be added to the root
    and named from anywhere in it, the branches name the items by `$ref` rather than copy them."""
    definitions: dict[str, Any] | None = {} if takes_definitions(schema, DEFINITION_PREFIX) else None
    root = schema if refers_from_root(schema) else None
    rewritten = rewritten_bottom_up(schema, lambda node: _without_contains(node, definitions, root))
    if definitions:
        rewritten = {**rewritten, "$defs": {**rewritten.get("$defs", {}), **definitions}}
    return rewritten


def _without_contains(node: dict[str, Any], definitions: dict[str, Any] | None, root: Any) -> dict[str, Any]:
    """`node` with its own `contains` written as branches, where that can be done."""
    branches = _branches(node, definitions, root) if "contains" in node else None
    if branches is None:
        return node
    kept = {key: value for key, value in node.items() if key not in _CONTAINS_KEYS}
    if not branches:
        return kept
    # The branches hold the array's type, items and bounds: beside them llguidance would intersect every branch with
    # them again (0.65 s for 21 branches of a ten-value enum; "schema too large" for twenty values).
    held = {"type", "items"} | {key for key in ("minItems", "maxItems") if is_count(kept.get(key))}
    return {**{key: value for key, value in kept.items() if key not in held}, "anyOf": branches}


def _branches(node: dict[str, Any], definitions: dict[str, Any] | None, root: Any) -> list[dict[str, Any]] | None:
    """The arrays `node` takes, one branch per set of places of its matching items; [] where `contains` asks
    nothing (`minContains: 0`, no `maxContains`); None where it is not written out. The matching and other items
    are named in `definitions` where given, else copied; the items' `$ref`s are followed in `root`."""
    wanted, least, most = node["contains"], node.get("minContains", 1), node.get("maxContains")
    if (node.get("type") != "array" or not node.keys().isdisjoint({"prefixItems", "anyOf", "uniqueItems"})
            or not is_count(least) or not (most is None or is_count(most) and most >= least)):
        return None
    if least == 0 and most is None:
        return []
    items = node.get("items", True)
    if not isinstance(items, (dict, bool)):
        return None  # (draft 7's list of items: a tuple, whose `contains` is not written out)
    others = items  # (at least `least` matches: the other items may match too)
    if most is not None:  # (every match placed: the other items fail)
        failing = ways_to_fail(wanted, items, root) if isinstance(items, dict) else None
        if not failing:  # (None: its failing cannot be written; []: no item can fail it)
            return None
        others = both(items, {"anyOf": failing})
    matching = both(items, wanted)
    if matching is False or others is False:
        return None
    fewest, longest = node.get("minItems", 0), node.get("maxItems")
    fewest = fewest if is_count(fewest) else 0
    positions = min(longest, CONTAINS_POSITIONS) if is_count(longest) else CONTAINS_POSITIONS
    counts = range(least, (least if most is None else most) + 1)
    sizes = (_REF_SIZE, _REF_SIZE) if definitions is not None else (len(json.dumps(matching)), len(json.dumps(others)))
    while sum(math.comb(positions, count) for count in counts) > CONTAINS_BRANCHES:
        positions -= 1
    while positions >= max(least, 1) and _copied(_places(positions, counts), sizes) > LARGEST_COPIES:
        positions -= 1
    if positions < max(least, 1):
        return None  # (no room for the matches, or an item too large to copy: llguidance's reading, its warning)
    places = _places(positions, counts)
    matching, others = _named(matching, definitions), _named(others, definitions)
    bound = {"maxItems": longest} if is_count(longest) else {}
    return [_placed(chosen, matching, others, fewest, bound) for chosen in places]


def _named(schema: Any, definitions: dict[str, Any] | None) -> Any:
    """A `$ref` to `schema`, added to `definitions`; `schema` itself where there are none, or where it is a boolean."""
    if definitions is None or isinstance(schema, bool):
        return schema
    name = f"{DEFINITION_PREFIX}{len(definitions) + 1}"
    definitions[name] = schema
    return {"$ref": f"#/$defs/{name}"}


def _places(positions: int, counts: range) -> list[tuple[int, ...]]:
    """Every set of places among the first `positions` of as many matching items as `counts` allows."""
    return [chosen for count in counts for chosen in itertools.combinations(range(positions), count)]


def _copied(places: list[tuple[int, ...]], sizes: tuple[int, int]) -> int:
    """Characters of JSON the branches of `places` copy, for a matching item and another of `sizes`."""
    return sum(sizes[0] * len(chosen) + sizes[1] * (max(chosen, default=-1) + 2 - len(chosen)) for chosen in places)


def _placed(chosen: tuple[int, ...], matching: Any, others: Any, fewest: int, bound: dict[str, Any]) -> dict[str, Any]:
    """The arrays whose items at the places `chosen` match, the others as `others` says."""
    prefix = [matching if place in chosen else others for place in range(max(chosen, default=-1) + 1)]
    return {"type": "array", **({"prefixItems": prefix} if prefix else {}), "items": others,
            "minItems": max(fewest, len(prefix)), **bound}

"""An array's `contains` written as branches llguidance holds to.

llguidance does not implement `contains`, `minContains` or `maxContains` (it warns that it ignores them),
and a model then writes an array with no item of the kind asked for (a meeting's attendees without its
chair, on a held-out schema, at both temperatures). It does implement `prefixItems`, `items`, `allOf` and
`anyOf`, and "some item matches C" is an `anyOf` over the position of that item:

    items I, contains C      anyOf [{prefixItems: [I, …, I, I ∧ C], items: I, minItems: i + 1}, i = 0, 1, …]

and "exactly one item matches C" (`maxContains: 1`) the same with every other item failing C, where that
failing can be written out (C asks only for required properties or listed values: see
schema_conditionals.py). The match is looked for among the first CONTAINS_POSITIONS items: an array whose
only match comes later is refused, which narrows what the grammar allows, as the bounds in grammar.py do.
Other cases (`minContains` above 1, `maxContains` above 1, a `contains` beside `prefixItems` or
`uniqueItems`, an array that may also be another type) stay as written, with llguidance's warning.
"""

from __future__ import annotations

import json
from typing import Any

from .schema_conditionals import both, ways_to_fail
from .schema_keywords import is_count, with_subschemas_changed

CONTAINS_POSITIONS = 8
# The branches copy the item's schema once per place it takes (36 for 8 positions), and llguidance is handed every
# copy: an item schema past this many characters of JSON (an array of arrays that each ask `contains`, whose own
# branches would be copied again) keeps its `contains` as written.
LARGEST_COPIED_ITEM = 2000
_CONTAINS_KEYS = {"contains", "minContains", "maxContains"}


def contains_as_branches(schema: Any) -> Any:
    """`schema` with every `contains` it holds, at any depth, written as `anyOf` branches where that can be done
    (see the module's docstring): a new schema, the input untouched."""
    if isinstance(schema, list):
        return [contains_as_branches(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    node = with_subschemas_changed(schema, contains_as_branches)
    branches = _branches(node) if "contains" in node else None
    if branches is None:
        return node
    kept = {key: value for key, value in node.items() if key not in _CONTAINS_KEYS}
    return {**kept, "anyOf": branches} if branches else kept


def _branches(node: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The arrays `node` takes, one branch per position of the matching item; [] where `contains` asks nothing
    (`minContains: 0`); None where it is not written out."""
    wanted, least, most = node["contains"], node.get("minContains", 1), node.get("maxContains")
    if (node.get("type") != "array" or not node.keys().isdisjoint({"prefixItems", "anyOf", "uniqueItems"})
            or not is_count(least) or least > 1 or (most is not None and most != 1)):
        return None
    if least == 0:
        return [] if most is None else None
    items = node.get("items", True)
    if not isinstance(items, (dict, bool)):
        return None  # (draft 7's list of items: a tuple, whose `contains` is not written out)
    others = items
    if most == 1:
        failing = ways_to_fail(wanted, items) if isinstance(items, dict) else None
        if not failing:  # (None: its failing cannot be written; []: no item can fail it)
            return None
        others = both(items, {"anyOf": failing})
    matching = both(items, wanted)
    if matching is False or others is False:
        return None
    if len(json.dumps(matching)) + len(json.dumps(others)) > LARGEST_COPIED_ITEM:
        return None
    fewest, longest = node.get("minItems", 0), node.get("maxItems")
    positions = min(longest, CONTAINS_POSITIONS) if is_count(longest) else CONTAINS_POSITIONS
    if positions == 0:
        return None  # (no item at all: nothing matches; llguidance's own reading, with its warning)
    bound = {"maxItems": longest} if is_count(longest) else {}
    return [{"type": "array", "prefixItems": [others] * position + [matching], "items": others,
             "minItems": max(fewest if is_count(fewest) else 0, position + 1), **bound}
            for position in range(positions)]

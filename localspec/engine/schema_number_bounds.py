"""Number bounds llguidance (1.x) misreads, moved to bounds it reads right, within what the schema asks.

First each node's bounds are written as one bound a side (`_one_bound_a_side`): draft 4's boolean
`exclusiveMinimum: true` as the exclusive bound its `minimum` names, and of an inclusive and an exclusive bound on
one side the one that binds (the same numbers).

Bounds past 2^53: llguidance reads a schema's numbers as 64-bit floats, exact to 2^53: `"maximum": 9007199254740999`
becomes 9007199254741000, and a model held to it wrote 9007199254741000, which the schema refuses. Such a bound is
moved inward to the nearest float on its side (the maximum down to 9007199254740998), as an inclusive bound (an
exclusive one at 2^53 too: the integer after it is no float), so that what llguidance holds to is within what the
schema asks; the few numbers between the two are left out, and a note says so.

An exclusive bound at a whole number on the side nearer zero, where the range ends within one of it: llguidance
then takes the bound itself (`0` for `exclusiveMinimum: 0, exclusiveMaximum: 0.5`, `1` between 1 and 1.5
exclusive, `-1` for `minimum: -1.5, exclusiveMaximum: -1`, `-0` below 0). Such a bound becomes the inclusive one a
step of NUMBER_STEP inside it, the smallest step localspec's bounds let a number write (nine digits after the
point): the same numbers. (On the side away from zero llguidance reads an exclusive bound right, and an inclusive
one of nine digits there would make it refuse spellings such as 4.9999 under 4.999999999: those are kept.)
"""

from __future__ import annotations

import math
from typing import Any, Callable

from .schema_keywords import NUMBER_STEP, finite_number, refers_into, rewritten_bottom_up, with_bounds

EXACT_UP_TO = 2**53  # a 64-bit float holds every integer of at most this magnitude
# Each bound as an inclusive one on its side: (keyword, +1 for a lower bound, what an exclusive one adds).
_BOUNDS = {"minimum": (1, 0), "exclusiveMinimum": (1, 1), "maximum": (-1, 0), "exclusiveMaximum": (-1, -1)}
_SIDES = (("minimum", "exclusiveMinimum", 1), ("maximum", "exclusiveMaximum", -1))
# Not rewritten within: moving a bound inward there would let more values through, not fewer (and llguidance
# holds neither).
_NOT_HELD = frozenset({"not", "if"})


def integer_bounds_as_floats(schema: Any) -> tuple[Any, list[str]]:
    """`schema` with each integer's or number's bound that no 64-bit float holds (past 2^53) moved inward to one
    that does, as an inclusive bound (a new schema; the input untouched), and a note for each bound moved."""
    notes: list[str] = []

    def change(node: dict[str, Any]) -> dict[str, Any]:
        if not _may_be_a_number(node):
            return node
        changed = _one_bound_a_side(node)
        for keyword, (side, exclusive_step) in _BOUNDS.items():
            bound = changed.get(keyword)
            if not isinstance(bound, int) or isinstance(bound, bool) or not abs(bound) < 2**63:
                continue  # (past 64 bits: refused, see `grammar.refuse_unusable_schema`)
            inclusive = bound + exclusive_step  # (llguidance reads the bound as a float first: 2^53 + 1 as 2^53)
            if abs(inclusive) <= EXACT_UP_TO and int(float(bound)) == bound:
                continue
            held = _float_inward(inclusive, side)
            if held == bound:
                continue
            del changed[keyword]
            inclusive_keyword = "minimum" if side > 0 else "maximum"
            changed[inclusive_keyword] = held
            notes.append(f"{keyword} {bound} is held as {inclusive_keyword} {held}: the constrained decoder reads"
                         " a bound as a 64-bit float, exact to 2^53")
        return changed

    return rewritten_bottom_up(schema, change, skipping=_NOT_HELD), notes


def _float_inward(value: int, side: int) -> int:
    """The integer nearest `value` that a 64-bit float holds exactly, no lower than it (`side` +1) or no higher
    (-1)."""
    held = float(value)
    if (side > 0 and held < value) or (side < 0 and held > value):
        held = math.nextafter(held, math.inf if side > 0 else -math.inf)
    return int(held)


def exclusive_bounds_as_inclusive(schema: Any) -> Any:
    """`schema` with each number's exclusive bound that llguidance would take itself (see the module's text)
    written as the inclusive bound a step inside it (a new schema; the input untouched)."""

    # Bounds are moved between a node and its `allOf` members or branches only where no `$ref` points into them
    # (it would then name a member without its bounds, or a branch with the node's).
    gather = not refers_into(schema, "allOf")
    spread = not refers_into(schema, "anyOf") and not refers_into(schema, "oneOf")

    def change(node: dict[str, Any]) -> dict[str, Any]:
        if not _may_be_a_number(node, frozenset({"number"})):  # (an integer's exclusive bound is read right)
            return node
        changed = _one_bound_a_side(node)  # (first: draft 4's flag names the node's own bound, not a member's)
        if gather:
            changed = _one_bound_a_side(_with_bounds_of_all_of(changed))
        if spread and changed.keys() & _BOUNDS and _branch_keyword(changed) is not None:
            return _bounds_into_branches(changed, change)
        lower, upper = _bound(changed, 1), _bound(changed, -1)
        for inclusive, exclusive, side in _SIDES:
            bound, other = changed.get(exclusive), (upper if side > 0 else lower)
            inside = bound + side * NUMBER_STEP if _whole(bound) else None
            if (inside is not None and inside != bound and side * bound >= 0 and other is not None
                    and side * (other - bound) <= 1):
                del changed[exclusive]
                changed[inclusive] = inside
        return changed

    return rewritten_bottom_up(schema, change, skipping=_NOT_HELD)


def _with_bounds_of_all_of(node: dict[str, Any]) -> dict[str, Any]:
    """`node` holding the number bounds of its `allOf` members itself, theirs taken out (the same values: all of
    them hold anyway): llguidance merges bounds from several nodes, then misreads an exclusive one (it took 1 for an
    `allOf` of `exclusiveMinimum: 1` and `exclusiveMaximum: 1.5`)."""
    members = node.get("allOf")
    if not isinstance(members, list) or not any(_bounds_of(member) for member in members):
        return node
    changed, kept = dict(node), []
    for member in members:
        if _bounds_of(member):
            member = _one_bound_a_side(member)
            changed = with_bounds(changed, {key: member.pop(key) for key in member.keys() & _BOUNDS.keys()})
        kept.append(member)
    return {**changed, "allOf": kept}


def _bounds_of(member: Any) -> bool:
    """Whether `member`, a subschema, bounds numbers (draft 4's booleans as well)."""
    return isinstance(member, dict) and bool(member.keys() & _BOUNDS.keys()) and _may_be_a_number(member)


def _branch_keyword(node: dict[str, Any]) -> str | None:
    """The one branching keyword of `node` (`anyOf` or `oneOf`, a list), or None."""
    keys = [key for key in ("anyOf", "oneOf") if isinstance(node.get(key), list)]
    return keys[0] if len(keys) == 1 else None


def _bounds_into_branches(node: dict[str, Any], change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    """`node`'s number bounds moved into each of its branches, each branch then changed again (`change`): A and (B or
    C) is (A and B) or (A and C), and llguidance misreads an exclusive bound whose other side is in a branch."""
    keyword = _branch_keyword(node)
    bounds = {key: node[key] for key in node.keys() & _BOUNDS.keys()}
    branches = []
    for branch in node[keyword]:
        if branch is True:
            branch = {}
        if isinstance(branch, dict):
            branch = change(_one_bound_a_side(with_bounds(_one_bound_a_side(branch), bounds)))
        branches.append(branch)
    return {**{key: value for key, value in node.items() if key not in bounds}, keyword: branches}


def _may_be_a_number(node: dict[str, Any], kinds_of_number: frozenset[str] = frozenset({"number", "integer"})) -> bool:
    """Whether `node` may take a number of `kinds_of_number` (by default an integer too): its type says so, or it
    names none."""
    kinds = node.get("type")
    if kinds is None:
        return True
    kinds = [kinds] if isinstance(kinds, str) else kinds
    return isinstance(kinds, list) and any(isinstance(kind, str) and kind in kinds_of_number for kind in kinds)


def _one_bound_a_side(node: dict[str, Any]) -> dict[str, Any]:
    """`node` with draft 4's boolean exclusive bounds written as draft 6's, and of an inclusive and an exclusive
    bound on one side only the one that binds (a new node where anything changed)."""
    changed = dict(node)
    for inclusive, exclusive, side in _SIDES:
        flag = changed.get(exclusive)
        if isinstance(flag, bool):
            del changed[exclusive]
            if flag and finite_number(changed.get(inclusive)):
                changed[exclusive] = changed.pop(inclusive)
        closed, open_ = changed.get(inclusive), changed.get(exclusive)
        if finite_number(closed) and finite_number(open_):
            del changed[inclusive if side * (open_ - closed) >= 0 else exclusive]
    return changed


def _whole(value: Any) -> bool:
    """A whole number a float holds exactly (no float is made of a larger integer: 10**400 overflows one)."""
    return finite_number(value) and abs(value) < EXACT_UP_TO and float(value).is_integer()


def _bound(node: dict[str, Any], side: int) -> float | None:
    """A number's bound on one side (+1 the lower, -1 the upper), inclusive or not, or None."""
    keywords = ("minimum", "exclusiveMinimum") if side > 0 else ("maximum", "exclusiveMaximum")
    bounds = [node[key] for key in keywords if finite_number(node.get(key))]
    return (max(bounds) if side > 0 else min(bounds)) if bounds else None

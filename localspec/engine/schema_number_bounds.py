"""Number bounds llguidance (1.x) misreads, moved to bounds it reads right, within what the schema asks.

An integer's bounds past 2^53: llguidance reads a schema's numbers as 64-bit floats, exact to 2^53: `"maximum": 9007199254740999` becomes
9007199254741000, and a model held to it wrote 9007199254741000, which the schema refuses. Such a bound
is moved inward to the nearest float on its side (the maximum down to 9007199254740998), so that what llguidance
holds to is within what the schema asks; the few integers between the two are left out, and a note says so.

A number's exclusive bound at a whole number, where the range ends within one of it: llguidance then takes the
bound itself (`0` for `exclusiveMinimum: 0, exclusiveMaximum: 0.5`, `1` between 1 and 1.5 exclusive, `-0` for
`minimum: -0.5, exclusiveMaximum: 0`). Such a lower bound becomes the inclusive one a step of NUMBER_STEP above it,
the smallest number localspec's bounds let a number write (nine digits after the point), and `exclusiveMaximum: 0`
the inclusive one a step below: the same numbers (a longer inclusive bound on the upper side would make llguidance
refuse spellings such as 4.9999 under 4.999999999, so other upper bounds are kept).
"""

from __future__ import annotations

import math
from typing import Any

from .schema_keywords import NUMBER_STEP, finite_number, rewritten_bottom_up

EXACT_UP_TO = 2**53  # a 64-bit float holds every integer of at most this magnitude
# Each bound as an inclusive one on its side: (keyword, +1 for a lower bound, what an exclusive one adds).
_BOUNDS = {"minimum": (1, 0), "exclusiveMinimum": (1, 1), "maximum": (-1, 0), "exclusiveMaximum": (-1, -1)}


def integer_bounds_as_floats(schema: Any) -> tuple[Any, list[str]]:
    """`schema` with each integer's bound that no 64-bit float holds (past 2^53) moved inward to one that does,
    as an inclusive bound (a new schema; the input untouched), and a note for each bound moved."""
    notes: list[str] = []

    def change(node: dict[str, Any]) -> dict[str, Any]:
        if node.get("type") != "integer":
            return node
        changed = dict(node)
        for keyword, (side, exclusive_step) in _BOUNDS.items():
            bound = node.get(keyword)
            if (not isinstance(bound, int) or isinstance(bound, bool) or not EXACT_UP_TO < abs(bound) < 2**63
                    or int(float(bound)) == bound):  # (past 64 bits: refused, see `grammar.refuse_unusable_schema`)
                continue
            held = _float_inward(bound + exclusive_step, side)
            del changed[keyword]
            inclusive_keyword = "minimum" if side > 0 else "maximum"
            changed[inclusive_keyword] = held
            notes.append(f"{keyword} {bound} is held as {inclusive_keyword} {held}: the constrained decoder reads"
                         " a bound as a 64-bit float, exact to 2^53")
        return changed

    return rewritten_bottom_up(schema, change), notes


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

    def change(node: dict[str, Any]) -> dict[str, Any]:
        if node.get("type") != "number":
            return node
        low, high = node.get("exclusiveMinimum"), _upper(node)
        changed = dict(node)
        stepped = _whole(low) and low + NUMBER_STEP > low  # (a float tells a step from the bound below 2^23 or so)
        if stepped and high is not None and high <= low + 1 and "minimum" not in node:
            del changed["exclusiveMinimum"]
            changed["minimum"] = low + NUMBER_STEP
        lower = changed.get("minimum", changed.get("exclusiveMinimum"))
        if node.get("exclusiveMaximum") == 0 and finite_number(lower) and lower >= -1 and "maximum" not in node:
            del changed["exclusiveMaximum"]
            changed["maximum"] = -NUMBER_STEP
        return changed

    return rewritten_bottom_up(schema, change)


def _whole(value: Any) -> bool:
    """A whole number a float holds exactly (no float is made of a larger integer: 10**400 overflows one)."""
    return finite_number(value) and abs(value) < EXACT_UP_TO and float(value).is_integer()


def _upper(node: dict[str, Any]) -> float | None:
    """The lowest of a number's upper bounds, or None."""
    bounds = [node[key] for key in ("maximum", "exclusiveMaximum") if finite_number(node.get(key))]
    return min(bounds) if bounds else None

"""An integer's bounds past 2^53, rounded inward to numbers a 64-bit float holds exactly.

llguidance reads a schema's numbers as 64-bit floats, exact to 2^53: `"maximum": 9007199254740999` becomes
9007199254741000, and a model held to it wrote 9007199254741000, which the schema refuses. Such a bound
is moved inward to the nearest float on its side (the maximum down to 9007199254740998), so that what llguidance
holds to is within what the schema asks; the few integers between the two are left out, and a note says so.
"""

from __future__ import annotations

import math
from typing import Any

from .schema_keywords import rewritten_bottom_up

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
            if (not isinstance(bound, int) or isinstance(bound, bool) or abs(bound) <= EXACT_UP_TO
                    or int(float(bound)) == bound):
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

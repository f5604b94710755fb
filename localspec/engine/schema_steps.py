"""Numbers by a fractional step between two bounds, written as the values they take.

llguidance (1.x) reads a `multipleOf` such as 0.25 digit by digit without
scaling the fraction: it takes `1.50` but not `1.5`, and next to a bound it
loses values altogether: between 1.25 and 1.5 it takes no spelling of 1.5, and
`minimum: 1.5, maximum: 1.5` it calls unsatisfiable. Where the bounds leave few
multiples, those multiples are listed instead (an `enum`, which llguidance
writes as given), exactly the numbers the schema takes, each spelled as JSON
spells it. Wider ranges keep llguidance's reading, which refuses only some
spellings of their values (`1.5` must be written `1.50`) and some values at
their bounds.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from typing import Any

from .schema_keywords import ANNOTATIONS, finite_number, rewritten_bottom_up

STEP_VALUES_LIMIT = 64  # multiples a range may leave to be listed (more: llguidance's own reading)

_EXACT_MULTIPLES = 10**15  # (k·step is exact in _PRECISION digits for k below this: a float's step has 17 at most)
_PRECISION = 64  # digits of the Decimal arithmetic (a quotient of two floats' 17 digits is near an integer far sooner)
_STEP_KEYS = {"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"} | ANNOTATIONS


def steps_as_values(schema: Any) -> Any:
    """`schema` with each number of a fractional `multipleOf` between two bounds that leave at most
    STEP_VALUES_LIMIT multiples written as the `enum` of those multiples (a new schema; the input untouched)."""

    def change(node: dict[str, Any]) -> dict[str, Any]:
        values = _multiples(node)
        if values is None:
            return node
        return {**{key: value for key, value in node.items() if key in ANNOTATIONS or key == "type"}, "enum": values}

    return rewritten_bottom_up(schema, change)


def _multiples(node: dict[str, Any]) -> list[int | float] | None:
    """The multiples of `node`'s fractional step within its bounds, where it is such a number and they are few
    enough; else None."""
    step = node.get("multipleOf")
    if node.get("type") != "number" or not node.keys() <= _STEP_KEYS or not finite_number(step) or isinstance(step, int):
        return None
    if step <= 0 or step.is_integer():
        return None
    low, high = _bound(node, "minimum", "exclusiveMinimum", lower=True), _bound(node, "maximum", "exclusiveMaximum")
    if low is None or high is None:
        return None
    with localcontext() as context:
        context.prec = _PRECISION
        step = Decimal(repr(step))
        first, last = math.ceil(low[0] / step), math.floor(high[0] / step)
        if low[1] and first * step == low[0]:  # (an exclusive bound that is a multiple itself)
            first += 1
        if high[1] and last * step == high[0]:
            last -= 1
        if not 0 < last - first + 1 <= STEP_VALUES_LIMIT or max(abs(first), abs(last)) >= _EXACT_MULTIPLES:
            return None
        return [_json_number(k * step) for k in range(first, last + 1)]


def _bound(node: dict[str, Any], inclusive: str, exclusive: str, lower: bool = False) -> tuple[Decimal, bool] | None:
    """The tighter of a node's inclusive and exclusive bound on one side (an exclusive one where they are equal), as
    (value, exclusive); None without one, or where one is not a finite number."""
    if not all(finite_number(node[key]) for key in (inclusive, exclusive) if key in node):
        return None
    given = [(Decimal(repr(node[key])) if isinstance(node[key], float) else Decimal(node[key]), key == exclusive)
             for key in (inclusive, exclusive) if key in node]
    if not given:
        return None
    if lower:
        return max(given)  # (on a tie (v, True) is the greater: the exclusive bound)
    return min(given, key=lambda bound: (bound[0], not bound[1]))




def _json_number(value: Decimal) -> int | float:
    """A multiple as JSON writes it: an integer where it is whole, else the float it is (its shortest spelling)."""
    return int(value) if value == value.to_integral_value() else float(value)

"""Numbers by a fractional step between close bounds are written as the values they take (schema_steps.py)."""

from __future__ import annotations

import json
from decimal import Decimal

import jsonschema
import pytest
from grammar_helpers import accepts

from localspec.engine.grammar import OutputFormat, compile_format
from localspec.engine.schema_steps import STEP_VALUES_LIMIT, steps_as_values


def grammar_of(schema: dict) -> str:
    compiled = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    assert not compiled.warnings
    return compiled.grammar


@pytest.mark.parametrize("schema", [
    {"type": "number", "minimum": 1.5, "maximum": 1.5, "multipleOf": 0.25},  # (llguidance: "no text can satisfy it")
    {"type": "number", "minimum": 1.25, "maximum": 1.5, "multipleOf": 0.25},  # (llguidance: no spelling of 1.5)
    {"type": "number", "exclusiveMinimum": -1.5, "maximum": 2, "multipleOf": 0.25, "description": "a step"},
    {"type": "number", "minimum": -1.5, "exclusiveMaximum": -0.5, "multipleOf": 0.5},
    {"type": "number", "minimum": 0, "maximum": 0.3, "exclusiveMaximum": 0.3, "multipleOf": 0.1},
    {"type": "number", "minimum": 19.99, "maximum": 20.07, "multipleOf": 0.01},
])
@pytest.mark.slow
def test_a_few_multiples_between_bounds_are_taken_exactly_as_the_schema_takes_them(schema: dict) -> None:
    grammar = grammar_of(schema)
    validator = jsonschema.Draft202012Validator(json.loads(json.dumps(schema), parse_float=Decimal))
    near_bounds = ("-1.45", "0.29", "0.3", "1.3", "19.98", "19.99", "20.03", "20.07", "20.075", "20.08")
    candidates = {Decimal(n) / 20 for n in range(-40, 45)} | {Decimal(text) for text in near_bounds}
    taken = 0
    for value in sorted(candidates):
        text = str(float(value)) if value != value.to_integral_value() else str(int(value))
        valid = validator.is_valid(Decimal(text))
        assert accepts(grammar, text) == valid, text
        taken += valid
    assert taken >= 1


def test_wider_ranges_and_other_numbers_are_left_to_llguidance() -> None:
    wide = {"type": "number", "minimum": 0, "maximum": 100, "multipleOf": 0.25}
    assert steps_as_values(wide) == wide
    assert "enum" in steps_as_values({**wide, "maximum": (STEP_VALUES_LIMIT - 1) * 0.25})
    assert "enum" not in steps_as_values({**wide, "maximum": STEP_VALUES_LIMIT * 0.25})  # (one more multiple)
    for other in ({"type": "number", "minimum": 0, "multipleOf": 0.25},  # (one bound)
                  {"type": "integer", "minimum": 0, "maximum": 3, "multipleOf": 0.5},
                  {"type": "number", "minimum": 0, "maximum": 3, "multipleOf": 2},
                  {"type": "number", "minimum": 0, "maximum": 3, "multipleOf": 0.5, "const": 1},
                  {"type": ["number", "null"], "minimum": 0, "maximum": 3, "multipleOf": 0.5},
                  {"type": "number", "minimum": 1.3, "maximum": 1.4, "multipleOf": 0.25},  # (none: llguidance says)
                  {"type": "number", "minimum": 0, "maximum": 10**400, "multipleOf": 0.5}):  # (an OverflowError)
        assert steps_as_values(other) == other
    nested = {"type": "object", "properties": {"r": {"type": "number", "minimum": 0, "maximum": 1, "multipleOf": 0.5}}}
    assert steps_as_values(nested)["properties"]["r"] == {"type": "number", "enum": [0, 0.5, 1]}
    assert nested["properties"]["r"]["multipleOf"] == 0.5  # (the input untouched)

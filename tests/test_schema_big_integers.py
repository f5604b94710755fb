"""An integer's bounds past 2^53, moved inward to numbers a 64-bit float holds (schema_big_integers.py)."""

from __future__ import annotations

import json

from grammar_helpers import accepts
from localspec.engine.grammar import OutputFormat, compile_format
from localspec.engine.schema_big_integers import integer_bounds_as_floats

TOP = 9007199254740999  # 2^53 + 7: the float nearest it is 2^53 + 8


def held(schema: dict) -> OutputFormat:
    return compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))


def test_a_bound_no_float_holds_is_moved_inward_and_said() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer", "minimum": -TOP, "exclusiveMaximum": TOP}},
              "items": {"type": "integer", "maximum": 2**53 + 2}}  # (a float holds 2^53 + 2: kept)
    moved, notes = integer_bounds_as_floats(schema)
    assert moved["properties"]["a"] == {"type": "integer", "minimum": -(TOP - 1), "maximum": TOP - 1}
    assert moved["items"] == schema["items"] and schema["properties"]["a"]["minimum"] == -TOP  # (the input as it was)
    assert notes == [f"minimum {-TOP} is held as minimum {-(TOP - 1)}: the constrained decoder reads a bound as a"
                     " 64-bit float, exact to 2^53",
                     f"exclusiveMaximum {TOP} is held as maximum {TOP - 1}: the constrained decoder reads a bound as"
                     " a 64-bit float, exact to 2^53"]
    assert integer_bounds_as_floats({"type": "number", "maximum": TOP}) == ({"type": "number", "maximum": TOP}, [])


def test_the_grammar_refuses_an_integer_past_such_a_bound() -> None:
    """(was: a random model held to `maximum` 2^53 + 7 wrote 2^53 + 8, which the schema refuses)"""
    compiled = held({"type": "integer", "minimum": TOP - 9, "maximum": TOP})
    assert not accepts(compiled.grammar, str(TOP + 1)) and accepts(compiled.grammar, str(TOP - 1))
    assert any("maximum 9007199254740999 is held as maximum 9007199254740998" in w for w in compiled.warnings)

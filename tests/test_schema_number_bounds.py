"""Number bounds llguidance misreads, moved to bounds it reads right (schema_number_bounds.py)."""

from __future__ import annotations

import json

import pytest

from grammar_helpers import accepts
from localspec.errors import InputError
from localspec.engine.grammar import OutputFormat, compile_format
from localspec.engine.schema_number_bounds import exclusive_bounds_as_inclusive, integer_bounds_as_floats

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
    assert integer_bounds_as_floats({"type": "number", "maximum": TOP})[0] == {"type": "number", "maximum": TOP - 1}
    assert integer_bounds_as_floats({"type": "string", "maximum": TOP}) == ({"type": "string", "maximum": TOP}, [])
    inside = {"not": {"maximum": TOP}, "if": {"maximum": TOP}}  # (there, inward would let more values through)
    assert integer_bounds_as_floats(inside) == (inside, [])


def test_the_grammar_refuses_an_integer_past_such_a_bound() -> None:
    """(was: a random model held to `maximum` 2^53 + 7 wrote 2^53 + 8, which the schema refuses)"""
    compiled = held({"type": "integer", "minimum": TOP - 9, "maximum": TOP})
    assert not accepts(compiled.grammar, str(TOP + 1)) and accepts(compiled.grammar, str(TOP - 1))
    assert any("maximum 9007199254740999 is held as maximum 9007199254740998" in w for w in compiled.warnings)


def test_an_exclusive_whole_bound_the_range_ends_near_is_not_itself_written() -> None:
    """(was: `0` for exclusiveMinimum 0 and exclusiveMaximum 0.5, `1` within (1, 1.5), `-0` within [-0.5, 0))"""
    cases = [({"exclusiveMinimum": 0, "exclusiveMaximum": 0.5}, ["0", "0.0"], ["0.000000001", "0.25", "0.4999"]),
             ({"exclusiveMinimum": 1, "exclusiveMaximum": 1.5}, ["1"], ["1.2", "1.000000001"]),
             ({"exclusiveMinimum": 0, "maximum": 0.001}, ["0"], ["0.001", "0.0005"]),
             ({"minimum": -0.5, "exclusiveMaximum": 0}, ["-0", "0"], ["-0.4999", "-0.25", "-0.000001", "-0.5"])]
    for bounds, refused, taken in cases:
        compiled = held({"type": "number", **bounds})
        assert not any(accepts(compiled.grammar, text) for text in refused), bounds
        assert all(accepts(compiled.grammar, text) for text in taken), bounds
    wide = {"type": "number", "exclusiveMinimum": 0, "maximum": 100}  # (llguidance reads it right: kept)
    assert exclusive_bounds_as_inclusive(wide) == wide


def test_a_bound_past_any_float_is_left_to_the_refusal_that_names_it() -> None:
    """(was: an OverflowError traceback, `math.isfinite(10**400)`, for an exclusive bound of 401 digits)"""
    import pytest

    from localspec.errors import InputError

    with pytest.raises(InputError, match="does not fit llguidance's 64-bit integers"):
        held({"type": "number", "exclusiveMinimum": 10**400, "maximum": 5})
    assert exclusive_bounds_as_inclusive({"type": "number", "exclusiveMinimum": 2**52, "maximum": 2**52 + 1}) == {
        "type": "number", "exclusiveMinimum": 2**52, "maximum": 2**52 + 1}  # (no float tells 2^52 + 10^-9 from it)


def test_a_listed_integer_no_float_holds_is_refused_naming_it() -> None:
    """(was: `{"const": 2^53 + 1}` wrote 2^53, which the schema refuses, and said nothing)"""
    for schema, number in [({"const": 2**53 + 1}, 2**53 + 1), ({"enum": [1, -(2**53 + 1)]}, -(2**53 + 1)),
                           ({"enum": [{"a": [2**64 - 1]}]}, 2**64 - 1)]:
        with pytest.raises(InputError, match=f"^s\\.json: the listed number {number} cannot be written exactly: "):
            held(schema)
    with pytest.raises(InputError, match=f"the listed number {2**63} cannot be written exactly"):
        held({"enum": [2**63]})  # (a float holds it, and llguidance wrote 9223372036854776000)
    for exact in (2**53, 2**53 + 2, -(2**63 - 2048)):
        assert accepts(held({"enum": [exact, "x"]}).grammar, str(exact))


B = 2**53


@pytest.mark.parametrize("schema, refused, taken", [
    # Bounds the steps before write: a `not` of 0 as the ranges on either side of it, with the bounds beside it.
    ({"type": "number", "minimum": -0.5, "maximum": 0.5, "not": {"const": 0}}, ["-0", "0"], ["0.1", "-0.1"]),
    ({"type": "number", "exclusiveMaximum": 1.5, "not": {"const": 1}}, ["1"], ["1.2", "0.5"]),
    # A negative whole upper bound; an inclusive bound beside the exclusive one; no type, or a list of them.
    ({"type": "number", "minimum": -1.5, "exclusiveMaximum": -1}, ["-1"], ["-1.2", "-1.0001", "-1.5"]),
    ({"type": "number", "minimum": 0, "exclusiveMinimum": 1, "exclusiveMaximum": 1.5}, ["1"], ["1.2"]),
    ({"type": "number", "minimum": -0.5, "maximum": 5, "exclusiveMaximum": 0}, ["-0", "0"], ["-0.2"]),
    ({"type": ["number", "null"], "exclusiveMinimum": 0, "exclusiveMaximum": 0.5}, ["0"], ["0.2", "null"]),
    ({"exclusiveMinimum": 0, "exclusiveMaximum": 0.5}, ["0"], ["0.2", '"x"']),
    # Draft 4's boolean exclusive bounds (`false` was read as a bound of 0, refusing the schema).
    ({"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 0.5}, ["0"], ["0.2", "0.5"]),
    ({"type": "number", "maximum": 0, "exclusiveMaximum": True, "minimum": -0.5}, ["-0", "0"], ["-0.2"]),
    ({"type": "number", "minimum": 5, "exclusiveMaximum": False}, ["4"], ["5", "6"]),
    # On the side away from zero llguidance reads it right: kept (an inclusive bound there refused -0.9999).
    ({"type": "number", "exclusiveMinimum": -1, "maximum": -0.5}, ["-1"], ["-0.9999", "-0.99", "-0.6"]),
    # An integer's exclusive bound at 2^53 (the integer after it is no float), a number's bound past it.
    ({"type": "integer", "exclusiveMinimum": B, "maximum": B + 4}, [str(B)], [str(B + 2), str(B + 4)]),
    ({"type": "integer", "exclusiveMaximum": -B, "minimum": -B - 4}, [str(-B)], [str(-B - 2)]),
    ({"type": "integer", "minimum": B - 5, "exclusiveMaximum": B + 1}, [str(B + 2)], [str(B)]),  # (read as 2^53)
    ({"type": "number", "maximum": B + 7}, [str(B + 8)], [str(B + 6)]),
    ({"type": "integer", "minimum": B, "maximum": B + 7, "exclusiveMaximum": True}, [str(B + 8), str(B + 7)],
     [str(B + 6)]),
    # Bounds split across nodes, which llguidance merges before it misreads them: an `allOf`'s members, a node's
    # own beside its `anyOf` or `oneOf` branches.
    ({"allOf": [{"exclusiveMinimum": 1}, {"exclusiveMaximum": 1.5}]}, ["1"], ["1.2"]),
    ({"type": "number", "allOf": [{"minimum": -1.5}, {"exclusiveMaximum": -1}]}, ["-1"], ["-1.2"]),
    ({"type": "number", "exclusiveMinimum": 1, "anyOf": [{"exclusiveMaximum": 1.5}, {"minimum": 3}, True]}, ["1"],
     ["1.2", "3", "7"]),
    ({"maximum": 1.5, "exclusiveMinimum": 0.5, "oneOf": [{"minimum": -2, "exclusiveMinimum": 1}]}, ["1"], ["1.2"]),
])
def test_bounds_llguidance_misreads_are_held_wherever_they_are(schema: dict, refused: list, taken: list) -> None:
    """(each was written by `run`, or taken by the grammar, though the schema refuses it; or refused, valid)"""
    grammar = held(schema).grammar
    assert not any(accepts(grammar, text) for text in refused) and all(accepts(grammar, text) for text in taken)


RATIO = {"type": "number", "allOf": [{"minimum": 0}, {"maximum": 1}]}


@pytest.mark.parametrize("schema, refused, taken", [
    # A `$ref` into an `allOf` member, or into a branch: the bounds stay where they are written.
    ({"type": "object", "properties": {"ratio": RATIO, "cap": {"$ref": "#/properties/ratio/allOf/1"}},
      "required": ["ratio", "cap"]}, [{"ratio": 0.5, "cap": 5}], [{"ratio": 0.5, "cap": -5}]),
    ({"type": "object", "properties": {"a": {"type": "number", "exclusiveMinimum": 0, "anyOf": [
        {"maximum": 0.5}, {"type": "string"}]}, "b": {"$ref": "#/properties/a/anyOf/0"}}, "required": ["a", "b"]},
     [{"a": 0.7, "b": 0}], [{"a": 0.2, "b": -3}]),
    # Draft 4's flag beside the node's own bound names that bound, not one taken from a member.
    ({"$schema": "http://json-schema.org/draft-04/schema#", "type": "number", "exclusiveMaximum": True,
      "allOf": [{"maximum": 5}]}, [6], [5, 4]),
])
def test_bounds_are_moved_between_nodes_only_where_nothing_else_names_them(schema: dict, refused: list,
                                                                          taken: list) -> None:
    """(the first two took 5 and refused -3 once bounds moved under a `$ref` that named where they had been)"""
    grammar = held(schema).grammar
    assert not any(accepts(grammar, json.dumps(value)) for value in refused)
    assert all(accepts(grammar, json.dumps(value)) for value in taken)

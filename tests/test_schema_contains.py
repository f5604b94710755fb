"""`contains` (with `minContains`/`maxContains`): written as branches llguidance holds to, exactly where it can
be, left as written (with llguidance's warning) elsewhere."""

from __future__ import annotations

import itertools
import json
from typing import Any

import jsonschema
import pytest
from grammar_helpers import accepts

from localspec.engine.grammar import OutputFormat, compile_format


ITEM = {"type": "object", "properties": {"role": {"enum": ["chair", "member", "guest"]}}, "required": ["role"],
        "additionalProperties": False}
CHAIR = {"type": "object", "properties": {"role": {"const": "chair"}}, "required": ["role"]}


def array(**keywords: Any) -> dict[str, Any]:
    return {"type": "array", "items": ITEM, "maxItems": 3, **keywords}


@pytest.mark.parametrize("schema", [
    array(contains=CHAIR),  # (was: any array, a meeting's attendees without its chair at both temperatures)
    array(contains=CHAIR, maxContains=1),  # exactly one
    array(contains=CHAIR, minContains=0),  # asks nothing
    array(contains=CHAIR, minContains=2, maxItems=4),  # at least two (was: left, with llguidance's warning)
    array(contains=CHAIR, minContains=2, maxContains=3, maxItems=4),  # two or three
    array(contains=CHAIR, minContains=0, maxContains=1),  # at most one
    array(contains=CHAIR, minContains=0, maxContains=0),  # none
    {"$defs": {"attendee": ITEM}, **array(items={"$ref": "#/$defs/attendee"}, contains=CHAIR, maxContains=1)},
    array(contains={"type": "object", "properties": {"role": {"enum": ["chair", "guest"]}}}, minItems=2),
    {"type": "array", "contains": {"type": "integer", "minimum": 5}, "items": {"type": "integer"}, "maxItems": 3},
    {"type": "array", "contains": {"type": "integer", "minimum": 5}, "items": {"type": "integer"}, "maxItems": 4,
     "minContains": 2, "maxContains": 2},  # every other item below the range
])
@pytest.mark.slow
def test_the_grammar_takes_exactly_the_arrays_the_schema_validates(schema: dict[str, Any]) -> None:
    compiled = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    assert compiled.warnings == ()  # (was: llguidance's "Unimplemented keys: contains")
    values = [{"role": role} for role in ("chair", "member", "guest")] if schema.get("items") in (
        ITEM, {"$ref": "#/$defs/attendee"}) else [1, 7]
    for length in range(schema["maxItems"] + 1):
        for items in itertools.product(values, repeat=length):
            valid = jsonschema.Draft202012Validator(schema).is_valid(list(items))
            assert accepts(compiled.grammar, json.dumps(list(items))) == valid, (schema, items)


RECORD_KINDS = {"$defs": {kind: {"type": "object", "properties": {"kind": {"const": kind}, "ttl": {"enum": [60, 300]}},
                                  "required": ["kind", "ttl"], "additionalProperties": False} for kind in ("A", "MX")},
                "type": "array", "maxItems": 3, "items": {"oneOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/MX"}]},
                "contains": {"type": "object", "properties": {"kind": {"const": "MX"}}, "required": ["kind"]},
                "minContains": 1, "maxContains": 2}


def test_items_of_a_union_fail_a_condition_where_their_branch_does() -> None:
    """A DNS zone's records of kinds told apart by a `const`, one or two of them mail exchangers (was: left, with
    llguidance's warning: which items fail was not written for a `oneOf` of items)."""
    compiled = compile_format(OutputFormat("json_schema", json.dumps(RECORD_KINDS), "s.json"))
    assert compiled.warnings == ()
    values = [{"kind": kind, "ttl": ttl} for kind in ("A", "MX") for ttl in (60, 300)]
    for length in range(4):
        for items in itertools.product(values, repeat=length):
            valid = jsonschema.Draft202012Validator(RECORD_KINDS).is_valid(list(items))
            assert accepts(compiled.grammar, json.dumps(list(items))) == valid, items


@pytest.mark.parametrize("schema", [
    array(contains={"type": "object", "properties": {"role": {"type": "string"}}}, maxContains=1),  # no failing
    array(contains={"type": "object", "properties": {"role": {"type": "string"}}}, maxContains=2),
])  # (minContains 3 with maxContains 2, which no array satisfies: refused, see the last test)
def test_what_cannot_be_written_out_is_left_with_the_warning(schema: dict[str, Any]) -> None:
    compiled = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    assert any("contains" in warning for warning in compiled.warnings)


def test_many_matches_are_looked_for_among_fewer_places() -> None:
    # the places of 4 matches among 8 items would make 70 branches: looked for among the first 7 (35 branches)
    schema = {"type": "array", "items": {"type": "integer"}, "contains": {"const": 1}, "minContains": 4}
    compiled = compile_format(OutputFormat("json_schema", json.dumps(schema)))
    assert compiled.warnings == ()
    assert accepts(compiled.grammar, "[1,2,1,1,3,4,1,5,6]") and accepts(compiled.grammar, "[2,1,1,1,1]")
    assert not accepts(compiled.grammar, "[1,1,1]") and not accepts(compiled.grammar, "[2,2,2,2,2,2,2,1,1,1,1]")


LARGE_ITEM = {"enum": [f"value number {i}" for i in range(120)]}
TWO_SEVENS = {"type": "array", "items": LARGE_ITEM, "contains": {"const": "value number 7"}, "minContains": 2}


def test_a_large_item_is_named_not_copied() -> None:
    # (was: llguidance's "schema too large" for every branch's copies, so the `contains` was left, with the warning)
    compiled = compile_format(OutputFormat("json_schema", json.dumps(TWO_SEVENS)))
    assert compiled.warnings == ()
    sevens = ["value number 1"] * 6 + ["value number 7"] * 2
    assert accepts(compiled.grammar, json.dumps(sevens)) and not accepts(compiled.grammar, json.dumps(sevens[:7]))


@pytest.mark.slow  # (copies of 70,000 characters compiled)
def test_where_items_cannot_be_named_a_large_one_is_copied_into_fewer_places() -> None:
    # an `$id` inside would change what `#/$defs/…` names: the branches copy the item, among its first few places
    xs = {**TWO_SEVENS, "items": {"enum": LARGE_ITEM["enum"][:50]}}  # (168 copies of it for 8 places)
    schema = {"type": "object", "properties": {"xs": xs, "other": {"$id": "other", "type": "integer"}}}
    compiled = compile_format(OutputFormat("json_schema", json.dumps(schema)))
    assert compiled.warnings == ()
    assert accepts(compiled.grammar, '{"xs":["value number 7","value number 7"]}')
    assert not accepts(compiled.grammar, '{"xs":["value number 7","value number 1"]}')


def test_items_stay_open_to_the_properties_contains_asks_for() -> None:
    # (was: the items closed to `a`, so no array held the `b` that `contains` asks for)
    items = {"type": "object", "properties": {"a": {"type": "integer"}}}
    xs = {"type": "array", "contains": {"required": ["b"]}, "items": items}
    schema = {"type": "object", "properties": {"xs": xs}}
    grammar = compile_format(OutputFormat("json_schema", json.dumps(schema))).grammar
    assert accepts(grammar, '{"xs":[{"b":1}]}') and not accepts(grammar, '{"xs":[{"a":1}]}')


def test_nested_contains_compiles_and_keeps_the_bounds() -> None:
    # (was: every level's branches copied into the next, "schema too large", or every bound dropped)
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(4):
        schema = {"type": "array", "items": schema, "contains": True}
    compiled = compile_format(OutputFormat("json_schema", json.dumps(schema)))
    assert accepts(compiled.grammar, "[[[[1]]]]") and not any("bounds" in note for note in compiled.warnings)


def test_a_draft7_tuple_keeps_its_warning() -> None:
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "items": [{"type": "integer"}],
              "contains": {"const": 1}}
    warnings = compile_format(OutputFormat("json_schema", json.dumps(schema))).warnings
    assert any("contains" in warning for warning in warnings)


def test_an_array_that_asks_more_matches_than_it_takes_is_refused() -> None:
    """`minContains` 2 with `maxContains` 1 (or `contains` with `maxContains` 0, its `minContains` being 1): no
    array satisfies it; it was taken with a warning and an empty array written."""
    from localspec.errors import InputError

    for counts, said in (({"minContains": 2, "maxContains": 1}, "minContains 2 is more than maxContains 1"),
                         ({"maxContains": 0}, "minContains 1 is more than maxContains 0")):
        schema = {"type": "array", "items": {"type": "integer"}, "contains": {"const": 5}, **counts}
        with pytest.raises(InputError, match=f"^s.json: no text can satisfy it: {said}$"):
            compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    either = {"type": ["array", "string"], "contains": {"const": 5}, "minContains": 2, "maxContains": 1}
    compile_format(OutputFormat("json_schema", json.dumps(either), "s.json"))  # (a string satisfies it)

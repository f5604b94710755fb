"""`contains` (with `minContains`/`maxContains`): written as branches llguidance holds to, exactly where it can
be, left as written (with llguidance's warning) elsewhere."""

from __future__ import annotations

import itertools
import json
from typing import Any

import jsonschema
import pytest

from localspec.engine.grammar import OutputFormat, compile_format


def accepts(grammar: str, text: str) -> bool:
    from llguidance import LLMatcher

    from localspec.engine.grammar import _byte_tokenizer

    matcher = LLMatcher(_byte_tokenizer(), grammar)
    return matcher.consume_tokens(list(text.encode())) and not matcher.is_error() and matcher.is_accepting()


ITEM = {"type": "object", "properties": {"role": {"enum": ["chair", "member", "guest"]}}, "required": ["role"],
        "additionalProperties": False}
CHAIR = {"type": "object", "properties": {"role": {"const": "chair"}}, "required": ["role"]}


def array(**keywords: Any) -> dict[str, Any]:
    return {"type": "array", "items": ITEM, "maxItems": 3, **keywords}


@pytest.mark.slow  # every array of up to three items through llguidance
@pytest.mark.parametrize("schema", [
    array(contains=CHAIR),  # (was: any array, a meeting's attendees without its chair at both temperatures)
    array(contains=CHAIR, maxContains=1),  # exactly one
    array(contains=CHAIR, minContains=0),  # asks nothing
    array(contains={"type": "object", "properties": {"role": {"enum": ["chair", "guest"]}}}, minItems=2),
    {"type": "array", "contains": {"type": "integer", "minimum": 5}, "items": {"type": "integer"}, "maxItems": 3},
])
def test_the_grammar_takes_exactly_the_arrays_the_schema_validates(schema: dict[str, Any]) -> None:
    compiled = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    assert compiled.warnings == ()  # (was: llguidance's "Unimplemented keys: contains")
    values = [{"role": role} for role in ("chair", "member", "guest")] if "items" in schema and \
        schema["items"] is ITEM else [1, 7]
    for length in range(4):
        for items in itertools.product(values, repeat=length):
            valid = jsonschema.Draft202012Validator(schema).is_valid(list(items))
            assert accepts(compiled.grammar, json.dumps(list(items))) == valid, (schema, items)


@pytest.mark.parametrize("schema", [
    array(contains=CHAIR, minContains=2),  # more than one: not written out
    array(contains={"type": "object", "properties": {"role": {"type": "string"}}}, maxContains=1),  # no failing
])
def test_what_cannot_be_written_out_is_left_with_the_warning(schema: dict[str, Any]) -> None:
    compiled = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    assert any("contains" in warning for warning in compiled.warnings)


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

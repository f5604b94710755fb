"""A map's `propertyNames` written as keys llguidance holds (engine/schema_property_names.py)."""

from __future__ import annotations

import json

import jsonschema
import pytest
from grammar_helpers import accepts

from localspec.engine.grammar import OutputFormat, compile_format
from localspec.engine.schema_property_names import property_names_as_keys

COUNTS = {"type": "object", "propertyNames": {"pattern": "^[a-z][a-z_]*$"},
          "additionalProperties": {"type": "integer", "minimum": 0}, "maxProperties": 3}
EVENTS = {"$defs": {"event": {"type": "string", "enum": ["push", "pull_request", 7]}},
          "type": "object", "propertyNames": {"$ref": "#/$defs/event"}, "additionalProperties": {"type": "null"}}


@pytest.mark.parametrize("schema, document", [
    (COUNTS, {"disk_full": 2, "timeout": 0}),
    (COUNTS, {"Disk": 2}),
    (COUNTS, {"disk": -1}),
    (COUNTS, {"a": 1, "b": 2, "c": 3, "d": 4}),
    (COUNTS, {}),
    (EVENTS, {"push": None, "pull_request": None}),
    (EVENTS, {"pull_request": None, "push": None}),  # (valid, but llguidance writes listed keys in their order)
    (EVENTS, {"release": None}),
    (EVENTS, {"push": 1}),
])
def test_the_grammar_takes_the_keys_property_names_takes(schema: dict, document: dict) -> None:
    grammar = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json")).grammar
    valid = jsonschema.Draft202012Validator(schema).is_valid(document)
    out_of_order = schema is EVENTS and list(document) == ["pull_request", "push"]
    assert accepts(grammar, json.dumps(document)) is (valid and not out_of_order)


def test_no_warning_where_it_is_written_and_llguidances_where_it_is_not() -> None:
    for schema in (COUNTS, EVENTS):
        assert compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json")).warnings == ()
    listed = {**COUNTS, "properties": {"total": {"type": "integer"}}}  # (a listed key too: left as it is)
    assert property_names_as_keys(listed) == listed
    lengths = {**COUNTS, "propertyNames": {"maxLength": 3}}
    assert property_names_as_keys(lengths) == lengths
    assert any("propertyNames" in warning
               for warning in compile_format(OutputFormat("json_schema", json.dumps(lengths), "s.json")).warnings)

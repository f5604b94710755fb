"""Arrays and objects whose own counts leave them no value (schema_counts_apart.py)."""

from __future__ import annotations

import json

import pytest

from grammar_helpers import accepts
from localspec.engine.grammar import OutputFormat, compile_format
from localspec.errors import InputError

CLOSED = {"type": "object", "properties": {"a": {"type": "integer"}, "b": False}, "additionalProperties": False}


def held(schema: dict) -> OutputFormat:
    return compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))


@pytest.mark.parametrize("schema, said", [
    ({**CLOSED, "minProperties": 2}, "minProperties 2 is more than the 1 property the object takes"),
    ({"type": "object", "additionalProperties": False, "minProperties": 1},
     "minProperties 1 is more than the 0 properties the object takes"),
    ({"type": "object", "required": ["a", "b"], "maxProperties": 1},
     "maxProperties 1 is fewer than the 2 properties the object requires"),
    ({"type": "object", "minProperties": 3, "maxProperties": 2}, "minProperties 3 is more than maxProperties 2"),
    ({"type": "object", "properties": {"x": {**CLOSED, "minProperties": 2}}, "required": ["x"]},
     "minProperties 2 is more than the 1 property"),
])
def test_counts_no_value_of_every_document_meets_are_refused_in_their_words(schema: dict, said: str) -> None:
    """(was: llguidance's "minProperties (2) is greater than number of properties (0)", counting only the required
    ones, and "required > maxProperties")"""
    with pytest.raises(InputError, match=f"^s\\.json: no text can satisfy it: {said}"):
        held(schema)


def test_counts_no_value_meets_in_a_branch_or_an_optional_property_rule_it_out() -> None:
    """(was: the branch's counts not enforced, with a warning, and `contains` ignored: `[1]` written where an
    optional property's array could hold no value)"""
    branch = held({"anyOf": [{**CLOSED, "minProperties": 2}, {"type": "integer"}]})
    assert accepts(branch.grammar, "7") and not accepts(branch.grammar, '{"a": 1}') and not branch.warnings
    apart = {"type": "array", "contains": {"type": "integer"}, "minContains": 3, "maxContains": 2}
    optional = held({"type": "object", "properties": {"a": apart}})
    assert accepts(optional.grammar, "{}") and not accepts(optional.grammar, '{"a": [1]}')
    assert not optional.warnings
    with pytest.raises(InputError, match="^s\\.json: no text can satisfy it$"):
        held({"anyOf": [{"type": "object", "minProperties": 3, "maxProperties": 2}, {**CLOSED, "minProperties": 2}]})
    held({**CLOSED, "type": ["object", "integer"], "minProperties": 2})  # (an integer satisfies it)


def test_counts_of_the_other_kind_or_under_a_reference_refuse_nothing() -> None:
    """(an array's counts say nothing of an object, nor an object's of an array; a `$ref` into a value ruled out
    pointed at nothing)"""
    for schema, text in [({"type": "array", "minProperties": 2, "maxProperties": 1}, "[]"),
                         ({"type": "object", "contains": {"const": 1}, "minContains": 2, "maxContains": 1}, "{}")]:
        assert accepts(held(schema).grammar, text)
    apart = {"type": "object", "minProperties": 3, "maxProperties": 1, "properties": {"a": {"type": "integer"}}}
    referring = {"type": "object", "properties": {"o": apart, "b": {"$ref": "#/properties/o/properties/a"}},
                 "required": ["b"]}
    assert accepts(held(referring).grammar, '{"b": 1}')

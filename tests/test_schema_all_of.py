"""An object of plain parts closed by `unevaluatedProperties: false`, written as one closed object
(schema_all_of.py): exact, against a validator."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from grammar_helpers import accepts
from localspec.engine.grammar import OutputFormat, compile_format
from localspec.engine.schema_all_of import parts_as_one_object
from localspec.engine.schema_places import survey_held
from localspec.engine.unique_items import schema_of_grammar

TASK = {"type": "object", "required": ["id", "owner"],
        "properties": {"id": {"type": "string", "pattern": "^AI-[0-9]{3}$"}, "owner": {"type": "string"}}}
ACTION = {"allOf": [{"$ref": "#/$defs/task"},
                    {"type": "object", "required": ["status"], "properties": {
                        "status": {"enum": ["open", "done"]}, "tags": {"type": "array", "items": {"type": "string"},
                                                                         "uniqueItems": True}}}],
          "unevaluatedProperties": False}
SCHEMA = {"$defs": {"task": TASK}, "type": "object", "properties": {"items": {"type": "array", "items": ACTION}}}

TEXTS = [
    '{"items": [{"id": "AI-001", "owner": "ana", "status": "open"}]}',
    '{"items": [{"id": "AI-001", "owner": "ana", "status": "open", "tags": ["a", "b"]}]}',
    '{"items": [{"id": "AI-001", "owner": "ana", "status": "open", "extra": 1}]}',  # (unevaluated: refused)
    '{"items": [{"id": "AI-001", "status": "open"}]}',  # (the base's owner missing)
    '{"items": [{"id": "AI-1", "owner": "ana", "status": "open"}]}',
    '{"items": [{"id": "AI-001", "owner": "ana", "status": "gone"}]}',
]


def test_a_base_and_its_extension_closed_by_unevaluated_properties_are_held_as_one_object() -> None:
    compiled = compile_format(OutputFormat("json_schema", json.dumps(SCHEMA), "s.json"))
    assert compiled.warnings == ()  # (was: unevaluatedProperties and uniqueItems not enforced)
    validator = Draft202012Validator(SCHEMA)
    assert [accepts(compiled.grammar, text) for text in TEXTS] == [validator.is_valid(json.loads(text))
                                                                   for text in TEXTS] == [True, True] + [False] * 4
    survey = survey_held(schema_of_grammar(compiled.grammar))  # (the extension's array followed: held unique)
    assert (len(survey.held), survey.not_held) == (1, 0)


def test_a_property_two_parts_name_takes_both_schemas_and_counts_the_tightest() -> None:
    schema = {"allOf": [{"properties": {"n": {"minimum": 1}}, "maxProperties": 3},
                        {"properties": {"n": {"maximum": 5}}, "maxProperties": 2}],
              "unevaluatedProperties": False, "title": "t"}
    assert parts_as_one_object(schema) == {
        "title": "t", "properties": {"n": {"allOf": [{"minimum": 1}, {"maximum": 5}]}},
        "maxProperties": 2, "additionalProperties": False}


def test_a_plain_object_closed_by_unevaluated_properties_is_closed() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "unevaluatedProperties": False}
    assert parts_as_one_object(schema) == {"type": "object", "properties": {"a": {"type": "integer"}},
                                           "additionalProperties": False}


@pytest.mark.parametrize("schema", [
    {"allOf": [{"properties": {"a": {}}, "additionalProperties": {"type": "string"}}], "unevaluatedProperties": False},
    {"allOf": [{"properties": {"a": {}}}, {"anyOf": [{"required": ["a"]}]}], "unevaluatedProperties": False},
    {"allOf": [{"properties": {"a": {}}}], "unevaluatedProperties": {"type": "string"}},
    {"allOf": [{"properties": {"a": {}}, "required": "a"}], "unevaluatedProperties": False},  # (malformed)
    {"$defs": {"x": {"allOf": [{"properties": {"a": {}}}], "unevaluatedProperties": False}},
     "properties": {"b": {"$ref": "#/$defs/x/allOf/0"}}},  # (a $ref into the parts)
    {"type": ["object", "null"], "allOf": [{"properties": {"a": {}}}], "unevaluatedProperties": False},
])
def test_parts_that_evaluate_other_keys_or_say_more_are_left_as_written(schema: dict) -> None:
    assert parts_as_one_object(schema) == schema

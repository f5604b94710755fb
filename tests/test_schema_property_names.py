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
RESERVED = {"type": "object", "additionalProperties": {"type": "integer"},  # (a name by a pattern, but a few)
            "propertyNames": {"pattern": "^[a-z][a-z0-9-]{1,19}$", "not": {"enum": ["default", "all", 3]}}}
LABELS = {"type": "object", "propertyNames": {"minLength": 2, "maxLength": 5}, "additionalProperties": {"type": "null"}}
NOT_EMPTY = {"type": "object", "propertyNames": {"not": {"const": ""}}, "additionalProperties": {"type": "boolean"}}
LISTED_BUT = {"type": "object", "propertyNames": {"enum": ["a", "b", "c"], "not": {"const": "b"}},
              "additionalProperties": {"type": "null"}}
ANY_NAME = {"type": "object", "propertyNames": {"type": "string", "not": {"enum": [1]}, "description": "any"},
            "additionalProperties": {"type": "integer"}}
LABEL = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"  # (a Kubernetes label's name: at most 63 characters)
K8S_LABELS = {"type": "object", "propertyNames": {"pattern": LABEL, "maxLength": 63},
              "additionalProperties": {"type": "string"}}
SHORT_WORDS = {"type": "object", "propertyNames": {"pattern": "^x-[a-z]+$", "maxLength": 10},
               "additionalProperties": {"type": "integer"}}
NON_EMPTY = {"type": "object", "propertyNames": {"minLength": 1}, "additionalProperties": {"type": "integer"}}
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
    (RESERVED, {"prod": 1, "eu-west": 2}),
    (RESERVED, {"default": 1}),
    (RESERVED, {"all": 1}),
    (RESERVED, {"defaults": 1, "al": 2}),
    (RESERVED, {"Prod": 1}),
    (RESERVED, {"prod": "on"}),
    (LABELS, {"ab": None, "abcde": None}),
    (LABELS, {"a": None}),
    (LABELS, {"abcdef": None}),
    (LABELS, {"ééééé": None}),  # (five characters, ten bytes: characters are counted)
    (LABELS, {"éééééé": None}),
    (LABELS, {"ab": 1}),
    (NOT_EMPTY, {"x": True, " ": False}),
    (NOT_EMPTY, {"": True}),
    (NOT_EMPTY, {"x": 1}),
    (LISTED_BUT, {"a": None, "c": None}),
    (LISTED_BUT, {"b": None}),
    (ANY_NAME, {"x": 1, "": 2}),
    (ANY_NAME, {"x": "1"}),
    (K8S_LABELS, {"app": "web", "a" * 63: "x", "tier-1": "x", "z": "x"}),
    (K8S_LABELS, {"a" * 64: "x"}),
    (K8S_LABELS, {"a" + "-" * 61 + "b": "x"}),
    (K8S_LABELS, {"a" + "-" * 62 + "b": "x"}),
    (K8S_LABELS, {"web-": "x"}),
    (SHORT_WORDS, {"x-abcdefgh": 1}),
    (SHORT_WORDS, {"x-abcdefghi": 1}),
    (NON_EMPTY, {"k" * 128: 1}),  # (no maximum: the bound on keys a schema takes freely)
    (NON_EMPTY, {"": 1}),
    ({**NON_EMPTY, "propertyNames": True}, {"": 1, "x": 2}),
    ({**NON_EMPTY, "propertyNames": False}, {}),
    ({**NON_EMPTY, "propertyNames": False}, {"x": 1}),
])
def test_the_grammar_takes_the_keys_property_names_takes(schema: dict, document: dict) -> None:
    grammar = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json")).grammar
    valid = jsonschema.Draft202012Validator(schema).is_valid(document)
    out_of_order = schema is EVENTS and list(document) == ["pull_request", "push"]
    assert accepts(grammar, json.dumps(document, ensure_ascii=False)) is (valid and not out_of_order)


def test_no_warning_where_it_is_written_and_llguidances_where_it_is_not() -> None:
    for schema in (COUNTS, EVENTS, RESERVED, LABELS, NOT_EMPTY, LISTED_BUT, ANY_NAME, K8S_LABELS,
                   SHORT_WORDS, NON_EMPTY, {**NON_EMPTY, "propertyNames": True}):
        assert compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json")).warnings == ()
    listed = {**COUNTS, "properties": {"total": {"type": "integer"}}}  # (a listed key too: left as it is)
    assert property_names_as_keys(listed) == listed
    for names in ({"pattern": "^[a-z]+$", "minLength": 3},  # (shorter names than the length: not written)
                  {"pattern": "^[a-z]+", "maxLength": 3},  # (open at its end: any length)
                  {"pattern": "^\\p{L}+$", "maxLength": 3},  # (not read here)
                  {"pattern": "^[a-z]{1,9}$", "maxLength": 3},  # (no open repeat to bound)
                  {"pattern": "^[a-z]+(-[a-z]+)*$", "maxLength": 20},  # (several: each bounded far below 20)
                  # (one, but bounded to fit the widest names it would refuse others that fit: `a-abcdefghij`)
                  {"pattern": "^[a-z]{1,20}-[a-z]*$", "maxLength": 25}, {"pattern": "^(?:a|bb)*$", "maxLength": 3},
                  {"pattern": "^[a-z]+$", "maxLength": 10**9},  # (beyond a counted key: as llguidance reads it)
                  {"maxLength": 100_000}, {"pattern": "^[a-z]+$", "not": {"pattern": "^x"}}):
        unwritten = {**COUNTS, "propertyNames": names}
        assert property_names_as_keys(unwritten) == unwritten
        assert any("propertyNames" in warning
                   for warning in compile_format(OutputFormat("json_schema", json.dumps(unwritten), "s.json")).warnings)


def test_a_name_longer_than_the_bound_on_free_keys_is_refused_where_no_maximum_is_given() -> None:
    grammar = compile_format(OutputFormat("json_schema", json.dumps(NON_EMPTY), "s.json")).grammar
    assert not accepts(grammar, json.dumps({"k" * 129: 1}))

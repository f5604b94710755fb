"""A value's `not` of listed values or types written as what it leaves (schema_not.py), and an object's `not` of
properties as a conditional's cases (schema_conditionals.py): exact, against a validator."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from grammar_helpers import accepts
from localspec.engine.grammar import OutputFormat, compile_format
from localspec.engine.schema_not import not_written_out
from localspec.errors import InputError

STRINGS = ["", "a", "r", "ro", "roo", "root", "rootx", "admin", "adm", "x", "a.b", "axb", "x-y", "p q", "c]", "^", "\\",
           "&&", "&", "~~", "é", "a\nb"]
NUMBERS = [-1, 0, 0.5, 1, 1.5, 2, 3, 4, 1.49, 1.51, 1000]
VALUES = [*STRINGS, *NUMBERS, None, True, False, {}, {"a": 1}, {"a": 1, "b": 2}, [], [1]]

SCHEMAS = [
    {"type": "string", "not": {"const": ""}},
    {"type": "string", "not": {"enum": ["root", "admin", "ro"]}},
    {"type": "string", "not": {"enum": ["a.b", "x-y", "p q", "c]", "^", "&&", "~~", "a\nb"]}},
    {"type": "string", "pattern": "^[a-z.]+$", "not": {"enum": ["a.b", "root"]}},  # (a pattern of its own)
    {"type": "string", "minLength": 2, "not": {"const": ""}},
    {"not": {"type": "null"}},
    {"type": ["string", "null"], "not": {"type": "null"}},
    {"type": ["integer", "null"], "not": {"type": ["null", "string"]}},
    {"not": {"type": ["number", "boolean"]}},
    {"type": "integer", "not": {"const": 3}},
    {"type": "integer", "minimum": -1, "not": {"const": 0}},  # (was: -1 refused, the ways left typed as numbers)
    {"type": "integer", "maximum": 1, "not": {"const": 0}},
    {"type": ["integer", "null"], "minimum": -1, "not": {"const": 0}},
    {"type": "number", "not": {"const": 1.5}},
    {"not": {"enum": [1, "a", None, True]}},
    {"not": {"const": True}},
    {"not": {"type": "string", "enum": ["a", 1]}},  # (1 is no string: the `not` takes it)
    {"enum": ["a", "b", "c", 1], "not": {"const": "b"}},
    {"enum": ["a", 1, 2.0, None], "not": {"type": "integer"}},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
     "not": {"required": ["a", "b"]}},
    {"anyOf": [{"const": 1}, {"type": "string"}], "not": {"type": "null"}},  # (into each branch: 1 stays listed)
    {"oneOf": [{"enum": [0.5, 1, None]}, {"type": "string"}], "not": {"enum": ["", None]}},
    {"type": "string", "anyOf": [{"maxLength": 3}, {"pattern": "^r"}], "not": {"enum": ["root", "ab"]}},
]


@pytest.mark.parametrize("schema", SCHEMAS, ids=[json.dumps(schema)[:60] for schema in SCHEMAS])
@pytest.mark.slow
def test_a_not_is_held_exactly_without_a_warning(schema: dict) -> None:
    compiled = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    assert compiled.warnings == ()
    validator = Draft202012Validator(schema)
    wrong = [value for value in VALUES
             if accepts(compiled.grammar, json.dumps(value, ensure_ascii=False)) != validator.is_valid(value)]
    assert wrong == []


def test_a_not_llguidance_cannot_take_written_out_keeps_its_warning() -> None:
    for refused in ({"pattern": "^a"}, {"type": "integer"}, {"enum": [[1]]}, {"const": {"a": 1}},
                    {"enum": [1e300]}, {"anyOf": [{"const": 1}]}, {"enum": ["a", "b\\"]}, {"const": 'say "hi"'},
                    {"enum": [0, 0.5]}):  # (between two numbers: llguidance took 0 in (0, 0.5))
        schema = {"not": refused}
        assert not_written_out(schema) == schema
        warnings = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json")).warnings
        assert any("not" in warning for warning in warnings), refused


def test_a_string_not_listed_is_one_by_a_pattern_held_unique() -> None:
    """Items of a pattern (not free strings) are held unique as any pattern's are (unique_items.py)."""
    schema = {"type": "array", "uniqueItems": True, "items": {"type": "string", "not": {"enum": ["root", "admin"]}}}
    rewritten = not_written_out(schema)
    assert rewritten["items"].keys() == {"type", "pattern"}
    compiled = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    assert compiled.warnings == ()
    assert accepts(compiled.grammar, '["bob", "rooty"]') and not accepts(compiled.grammar, '["bob", "root"]')


def test_the_input_is_left_untouched() -> None:
    schema = {"type": "string", "not": {"const": ""}}
    not_written_out(schema)
    assert schema == {"type": "string", "not": {"const": ""}}


def test_a_not_a_ref_points_into_is_kept_and_one_that_leaves_nothing_keeps_its_warning() -> None:
    into = {"$defs": {"x": {"type": "object", "properties": {"p": {}}, "not": {"required": ["p"]}}},
            "type": "object", "properties": {"b": {"$ref": "#/$defs/x/not"}}}
    compiled = compile_format(OutputFormat("json_schema", json.dumps(into), "s.json"))
    assert accepts(compiled.grammar, '{"b": {"p": 1}}')
    nothing = {"const": "a", "not": {"const": "a"}}
    assert not_written_out(nothing) == nothing


@pytest.mark.parametrize("schema", [{"not": {}}, {"not": True}, {"not": {"description": "anything"}},
                                    {"type": "string", "not": {"type": "string"}}])
def test_a_not_of_every_value_leaves_no_text_and_says_so(schema: dict) -> None:
    """llguidance warned that it does not implement `not`, then let any value be written (`{"not": {}}`: 5.418)."""
    with pytest.raises(InputError, match="^s.json: no text can satisfy it$"):
        compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    optional = {"type": "object", "properties": {"gone": schema, "b": {"type": "integer"}}, "required": ["b"]}
    compiled = compile_format(OutputFormat("json_schema", json.dumps(optional), "s.json"))
    assert accepts(compiled.grammar, '{"b": 1}') and not compiled.warnings


def test_a_strings_not_beside_its_pattern_leaves_the_object_around_it_closed() -> None:
    """The `not` and the `pattern` go into an `allOf` of the string's own, which had been taken for objects merged:
    every object in the schema was left open to keys it does not list."""
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^a", "not": {"const": "ax"}}}}
    grammar = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json")).grammar
    assert accepts(grammar, '{"a": "ab"}') and not accepts(grammar, '{"a": "ax"}')
    assert not accepts(grammar, '{"a": "ab", "b": 1}') and not accepts(grammar, '{"b": 1}')

"""Recursive schemas held to RECURSION_LEVELS levels: what nests at most that deep is written as the schema
allows, nothing deeper, and a branch that ends is always left at the last level."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from grammar_helpers import accepts

from localspec.engine.grammar import OutputFormat, compile_format
from localspec.engine.schema_recursion import RECURSION_LEVELS, recursion_bounded
from localspec.errors import InputError

TREE = {"$defs": {"node": {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 8},
    "children": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/node"}}},
    "required": ["name"], "additionalProperties": False}}, "$ref": "#/$defs/node"}
LIST = {"type": "object", "properties": {"value": {"type": "integer"},
                                         "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
        "required": ["value", "next"], "additionalProperties": False}
MUTUAL = {"definitions": {  # draft 7's map, two definitions on one cycle, reached from a property
    "section": {"type": "object", "properties": {"title": {"type": "string"}, "body": {"$ref": "#/definitions/body"}},
                "required": ["title"], "additionalProperties": False},
    "body": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"$ref": "#/definitions/section"}]}}},
    "type": "object", "properties": {"doc": {"$ref": "#/definitions/section"}}, "required": ["doc"],
    "additionalProperties": False}


def tree(depth: int) -> dict[str, Any]:
    return {"name": "a"} if depth == 1 else {"name": "a", "children": [tree(depth - 1)]}


def linked(depth: int) -> dict[str, Any]:
    return {"value": 1, "next": None if depth == 1 else linked(depth - 1)}


def sections(depth: int) -> dict[str, Any]:
    return {"title": "t"} if depth == 1 else {"title": "t", "body": ["x", sections(depth - 1)]}


@pytest.mark.parametrize("schema, document, wrap", [
    (TREE, tree, lambda value: value),
    (LIST, linked, lambda value: value),
    (MUTUAL, sections, lambda value: {"doc": value}),
], ids=["tree", "root-list", "mutual"])
def test_documents_nest_the_cycle_up_to_the_levels_and_no_deeper(schema: dict[str, Any], document: Any,
                                                                  wrap: Any) -> None:
    grammar = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json")).grammar
    for depth in range(1, RECURSION_LEVELS + 2):
        text = json.dumps(wrap(document(depth)))
        assert jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))  # (all valid: the bound is ours)
        assert accepts(grammar, text) == (depth <= RECURSION_LEVELS), depth


def test_the_last_level_leaves_the_branch_that_ends() -> None:
    """At the last level of a list whose `next` is the list or null, `next` can only be null: never a dead end."""
    grammar = compile_format(OutputFormat("json_schema", json.dumps(LIST), "s.json")).grammar
    deepest = json.dumps(linked(RECURSION_LEVELS))
    prefix = deepest[:deepest.rindex("null")]
    assert accepts(grammar, prefix + "null" + "}" * RECURSION_LEVELS)
    assert not accepts(grammar, prefix + '{"value": 1, "next": null}' + "}" * RECURSION_LEVELS)


def test_schemas_without_recursion_or_with_clashing_names_are_left_as_they_are() -> None:
    plain = {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"type": "string"}}, "$ref": "#/$defs/a"}
    assert recursion_bounded(plain) is plain
    clashing = {"$defs": {**TREE["$defs"], "localspec_level1_0": {}}, "$ref": "#/$defs/node"}
    assert recursion_bounded(clashing) is clashing
    before = json.dumps(TREE)
    assert recursion_bounded(TREE) != TREE and json.dumps(TREE) == before  # (a new schema: the input untouched)


def test_each_cycle_counts_its_own_levels() -> None:
    """A list whose items hold trees: a tree reached from the list's level 5 still has all its levels (was: the
    list's levels went on into the tree, and a required tree at the list's last level left no document at all)."""
    schema = {"$defs": {
        "list": {"type": "object", "properties": {"leaf": {"$ref": "#/$defs/tree"},
                                                  "next": {"anyOf": [{"$ref": "#/$defs/list"}, {"type": "null"}]}},
                 "required": ["leaf", "next"], "additionalProperties": False},
        "tree": TREE["$defs"]["node"] | {"properties": {**TREE["$defs"]["node"]["properties"], "children": {
            "type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/tree"}}}}},
        "$ref": "#/$defs/list"}
    compiled = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    assert compiled.warnings == ()
    document: Any = {"leaf": tree(RECURSION_LEVELS), "next": None}
    for _ in range(RECURSION_LEVELS - 1):
        document = {"leaf": tree(1), "next": document}
    assert accepts(compiled.grammar, json.dumps(document))
    assert not accepts(compiled.grammar, json.dumps({"leaf": tree(1), "next": document}))


@pytest.mark.parametrize("schema", [
    {"$id": "https://example.com/s.json", "$defs": {"leaf": {"type": "integer"}}, "type": "object",
     "properties": {"l": {"$ref": "https://example.com/s.json#/$defs/leaf"}, "next": {"$ref": "#"}}},
    {"$defs": 5, "type": "object", "properties": {"next": {"$ref": "#"}}},
    {"$defs": [{}], "type": "object", "properties": {"next": {"$ref": "#"}}},
])
def test_a_schema_whose_references_name_more_than_definitions_is_left_as_written(schema: dict[str, Any]) -> None:
    assert recursion_bounded(schema) is schema
    if isinstance(schema.get("$defs", {}), dict):
        compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))  # (no exception: as before)
    else:  # (no schema: refused as it is read, schema_shape.py)
        with pytest.raises(InputError, match="`\\$defs` must be an object whose values are schemas"):
            compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))


def test_a_reference_into_the_schema_is_written_out_as_a_definition_is() -> None:
    """`#/properties/child` (not a definition) names a schema that recurs: its levels are written out too."""
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 4}, "child": {
        "type": "object", "properties": {"name": {"type": "string"}, "child": {"$ref": "#/properties/child"}},
        "required": ["name"]}}, "required": ["name"]}
    assert recursion_bounded(schema) is not schema
    grammar = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json")).grammar

    def nested(depth: int) -> dict[str, Any]:
        return {"name": "a"} if depth == 0 else {"name": "a", "child": nested(depth - 1)}

    for depth in range(RECURSION_LEVELS + 3):  # (the property's own schema, then its levels)
        assert jsonschema.Draft202012Validator(schema).is_valid(nested(depth))
        assert accepts(grammar, json.dumps(nested(depth))) == (depth <= RECURSION_LEVELS + 1), depth


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"x": {"$ref": "#/properties/x"}}, "required": ["x"]},
    {"type": "object", "properties": {"x": {"type": "object", "properties": {"y": {"$ref": "#/properties/x"}},
                                            "required": ["y"]}}, "required": ["x"]},
    {"$defs": {"a": {"type": "object", "properties": {"b": {"$ref": "#/$defs/b"}}, "required": ["b"]},
               "b": {"type": "array", "items": {"$ref": "#/$defs/a"}, "minItems": 1}}, "$ref": "#/$defs/a"},
])
def test_a_schema_whose_every_document_nests_without_end_is_refused(schema: dict[str, Any]) -> None:
    """llguidance takes it, and the output came to a dead end after `{"x"` (`NoExtensionBias`); now one line."""
    with pytest.raises(InputError, match="^s.json: no text can satisfy it: every way through it refers to itself"):
        compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    optional = {**schema, "required": []} if "required" in schema else {**schema, "$ref": "#/$defs/b"}
    optional["$defs"] = {**schema.get("$defs", {})}
    if "b" in optional["$defs"]:
        optional["$defs"]["b"] = {**optional["$defs"]["b"], "minItems": 0}
    compile_format(OutputFormat("json_schema", json.dumps(optional), "s.json"))  # (a way out: taken)


def test_unique_items_are_still_held_in_a_recursive_schema() -> None:
    from localspec.engine.schema_places import survey_held
    from localspec.engine.unique_items import schema_of_grammar

    schema = {**LIST, "properties": {**LIST["properties"], "tags": {"type": "array", "items": {"type": "string"},
                                                                     "uniqueItems": True}}}
    compiled = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    survey = survey_held(schema_of_grammar(compiled.grammar))
    assert compiled.warnings == () and survey.held and survey.not_held == 0

"""A `oneOf` whose branches exclude each other, written as the `anyOf` it equals (engine/schema_one_of.py)."""

from __future__ import annotations

import json

import jsonschema
import pytest
from grammar_helpers import accepts

from localspec.engine.grammar import OutputFormat, compile_format
from localspec.engine.schema_one_of import exclusive_one_of_as_any_of

ONE_OF_WARNING = "oneOf not fully supported"


def kind(name: str, **more: dict) -> dict:
    return {"type": "object", "properties": {"kind": {"const": name}, **more}, "required": ["kind", *more],
            "additionalProperties": False}


SHAPES = {"$defs": {"circle": kind("circle", r={"type": "integer"}),
                    "square": kind("square", side={"type": "integer"})},
          "oneOf": [{"$ref": "#/$defs/circle"}, {"$ref": "#/$defs/square"}]}


@pytest.mark.parametrize("schema, exclusive", [
    ({"oneOf": [{"type": "string"}, {"type": "number"}]}, True),
    ({"oneOf": [{"type": "object"}, {"type": "null"}, {"enum": [1, 2]}]}, True),
    (SHAPES, True),  # told apart by a const both require, through $refs
    ({"oneOf": [kind("a"), {**kind("b"), "properties": {"kind": {"enum": ["b", "c"]}}}]}, True),
    ({"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 0}]}, False),  # 1 is both
    ({"oneOf": [kind("a"), {**kind("b"), "properties": {"kind": {"enum": ["a", "b"]}}}]}, False),  # "a" in both
    ({"oneOf": [kind("a"), {**kind("b"), "required": []}]}, False),  # {"kind": "a"}... and {} in the second
    ({"oneOf": [{"properties": {"kind": {"const": "a"}}, "required": ["kind"]},
                {"properties": {"kind": {"const": "b"}}, "required": ["kind"]}]}, False),  # (any string is both)
    ({"$defs": {"any": {"$ref": "#/$defs/any"}}, "oneOf": [{"type": "string"}, {"$ref": "#/$defs/any"}]}, False),
    ({"oneOf": [{"type": "string"}]}, False),  # (one branch: nothing to tell apart)
    ({"oneOf": [{"type": "object"}, True]}, False),  # (`true` takes every object: it raised an AttributeError)
    ({"oneOf": [True, kind("a")]}, False),
    # A branch that is a union itself (an ESLint rule: a severity, a number or a string, or an array).
    ({"$defs": {"severity": {"oneOf": [{"type": "integer"}, {"enum": ["off", "warn"]}]}},
      "oneOf": [{"$ref": "#/$defs/severity"}, {"type": "array"}]}, True),
    ({"oneOf": [{"anyOf": [{"type": "integer"}, {"type": "string"}]}, {"type": "string"}]}, False),
    ({"$defs": {"u": {"anyOf": [{"$ref": "#/$defs/u"}, {"type": "string"}]}},  # (a cycle: any type)
      "oneOf": [{"$ref": "#/$defs/u"}, {"type": "number"}]}, False),
])
def test_a_one_of_becomes_an_any_of_only_where_no_value_satisfies_two_branches(schema: dict, exclusive: bool) -> None:
    rewritten = exclusive_one_of_as_any_of(schema)
    assert ("anyOf" in rewritten) is exclusive and ("oneOf" in rewritten) is not exclusive
    assert "oneOf" in schema  # (the input untouched)
    warnings = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json")).warnings
    if exclusive:
        assert not any(ONE_OF_WARNING in warning for warning in warnings)


@pytest.mark.parametrize("document", [
    {"kind": "circle", "r": 2}, {"kind": "square", "side": 3}, {"kind": "circle", "side": 3},
    {"kind": "triangle"}, {"kind": "square"}, 5, "circle",
])
def test_the_grammar_takes_what_the_one_of_takes(document: object) -> None:
    grammar = compile_format(OutputFormat("json_schema", json.dumps(SHAPES), "s.json")).grammar
    assert accepts(grammar, json.dumps(document)) is jsonschema.Draft202012Validator(SHAPES).is_valid(document)


def test_a_nested_one_of_is_rewritten_and_a_schema_with_a_nested_id_is_left_as_it_is() -> None:
    nested = {"type": "object", "properties": {"id": {"oneOf": [{"type": "string"}, {"type": "integer"}]}}}
    assert "anyOf" in exclusive_one_of_as_any_of(nested)["properties"]["id"]
    with_id = {"$id": "https://example.com/root", "properties": {"x": {"$id": "x", **SHAPES}}}
    assert exclusive_one_of_as_any_of(with_id) == with_id


def presence(*branches: list[str], **more: object) -> dict:
    names = sorted({name for branch in branches for name in branch})
    return {"type": "object", "properties": {name: {"type": "integer"} for name in names},
            "additionalProperties": False, "oneOf": [{"required": branch} for branch in branches], **more}


@pytest.mark.parametrize("schema", [
    presence(["image"], ["build"], ["compose", "service"]),  # (a dev container: exactly one way to start it)
    presence(["a", "b"], ["b", "c"]),  # (sharing a name)
    presence(["a"], ["a", "b"]),  # (the second holds only where the first does: never alone)
    presence(["a"], ["b"], minProperties=1),
    {**presence(["a"], ["b"]), "type": ["object", "null"]},  # (null takes every `required`: two branches, refused)
])
def test_a_one_of_of_presence_only_branches_takes_exactly_the_objects_one_branch_takes(schema: dict) -> None:
    """llguidance held such a `oneOf` as an `anyOf` (with its warning): an image and a build at once came out."""
    compiled = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    assert not any(ONE_OF_WARNING in warning for warning in compiled.warnings)
    names = list(schema["properties"])
    validator = jsonschema.Draft202012Validator(schema)
    for present in range(2 ** len(names)):  # (every set of names, in the listed order llguidance writes them in)
        document = {name: 1 for bit, name in enumerate(names) if present >> bit & 1}
        assert accepts(compiled.grammar, json.dumps(document)) is validator.is_valid(document), document
    for other in (None, "x", 5, []):
        assert accepts(compiled.grammar, json.dumps(other)) is validator.is_valid(other), other


def test_presence_only_branches_with_more_ways_than_the_limit_are_left_as_they_are() -> None:
    from localspec.engine.schema_one_of import PRESENCE_WAYS_LIMIT

    many = presence(*[[f"a{i}", f"b{i}"] for i in range(4)])  # (each way: one of 2 names absent in 3 others)
    assert 4 * 2 ** 3 <= PRESENCE_WAYS_LIMIT and "anyOf" in exclusive_one_of_as_any_of(many)
    too_many = presence(*[[f"a{i}", f"b{i}", f"c{i}"] for i in range(4)])  # (4 × 3³ = 108)
    assert exclusive_one_of_as_any_of(too_many) == too_many


def test_a_wide_union_that_refers_to_itself_is_read_once() -> None:
    """Reading a branch's types through its unions took minutes on a union of ten `$ref`s to itself."""
    import time

    itself = {"$ref": "#/$defs/a"}
    schema = {"$defs": {"a": {"anyOf": [{"type": "array", "items": itself}] + [itself] * 12}},
              "properties": {"v": {"oneOf": [itself, {"type": "string"}]}}}
    started = time.perf_counter()
    assert "oneOf" in exclusive_one_of_as_any_of(schema)["properties"]["v"]  # (a cycle: any type, not exclusive)
    assert time.perf_counter() - started < 1.0


def test_the_names_ways_leave_absent_do_not_raise_the_bound_on_collections() -> None:
    from localspec.engine.grammar import COLLECTION_LIMIT, bounded_values

    schema = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
              "oneOf": [{"required": [f"a{i}", f"b{i}"]} for i in range(4)]}
    ways = exclusive_one_of_as_any_of(schema)
    assert len(ways["anyOf"]) == 32 and bounded_values(ways)["properties"]["tags"]["maxItems"] == COLLECTION_LIMIT


def test_arrays_beside_presence_only_branches_stay_held_unique_and_no_warning_comes() -> None:
    schema = {"type": "object", "properties": {"image": {"type": "string"}, "build": {"type": "string"},
                                               "tags": {"type": "array", "items": {"type": "string"},
                                                        "uniqueItems": True}},
              "oneOf": [{"required": ["image"]}, {"required": ["build"]}]}
    assert compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json")).warnings == ()
    refused = {**schema, "type": ["string", "null"]}  # (takes no object: no value is valid, left as written)
    assert exclusive_one_of_as_any_of(refused) == refused

"""JSON Schema's conditionals (`if`/`then`/`else`, `dependentRequired`, `dependentSchemas`, `dependencies`)
held as branches: the compiled grammar lets through exactly the documents `jsonschema` validates."""

from __future__ import annotations

import itertools
import json
from typing import Any, Iterator

import jsonschema
import pytest
from grammar_helpers import accepts

from localspec.engine.grammar import OutputFormat, compile_format
from localspec.engine.schema_conditionals import conditionals_as_branches
from localspec.engine.schema_keywords import CASES_COMMENT
from localspec.engine.schema_places import survey_held
from localspec.errors import InputError

PAYMENT = {
    "type": "object",
    "properties": {"method": {"enum": ["card", "bank", "cash"]}, "card_number": {"type": "string"},
                   "iban": {"type": "string"}, "amount": {"type": "integer"}},
    "required": ["method", "amount"],
    "if": {"properties": {"method": {"const": "card"}}},
    "then": {"required": ["card_number"]},
    "else": {"properties": {"card_number": False}},
    "additionalProperties": False,
}
CONTACT = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "phone": {"type": "string"}, "email": {"type": "string"},
                   "prefers": {"enum": ["phone", "email"]}},
    "required": ["name"],
    "dependentRequired": {"prefers": ["phone", "email"]},
}
SHIPPING = {  # an `if` that asks for a property (required) and a boolean, and a dependency as a schema
    "type": "object",
    "properties": {"express": {"type": "boolean"}, "country": {"enum": ["DE", "FR", "US"]},
                   "courier": {"type": "string"}, "insured": {"type": "boolean"}, "value": {"type": "integer"}},
    "if": {"properties": {"express": {"const": True}, "country": {"enum": ["DE", "FR"]}},
           "required": ["express"]},
    "then": {"required": ["courier"]},
    "dependentSchemas": {"insured": {"required": ["value"]}},
}
DRAFT7 = {  # draft 7's `dependencies`: a list of names and a schema
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"enum": [1, 2]}},
    "dependencies": {"a": ["b"], "c": {"properties": {"b": {"const": 1}}}},
}
NESTED = {  # a conditional inside an array's items, the `then` of a property's own
    "type": "object",
    "properties": {"items": {"type": "array", "maxItems": 2, "items": {
        "type": "object",
        "properties": {"kind": {"enum": ["a", "b"]}, "size": {"type": "integer"}},
        "required": ["kind"],
        "if": {"properties": {"kind": {"const": "b"}}}, "then": {"required": ["size"]},
        "else": {"properties": {"size": False}}}}},
    "required": ["items"],
}
AGE = {  # `if` on a range of an integer, and on an open number's exclusive bound
    "type": "object",
    "properties": {"age": {"type": "integer"}, "licence": {"type": "string"}, "guardian": {"type": "string"},
                   "score": {"type": "number"}, "retest": {"type": "boolean"}},
    "required": ["age"],
    "if": {"properties": {"age": {"type": "integer", "minimum": 18, "maximum": 120}}},
    "then": {"required": ["licence"]},
    "else": {"required": ["guardian"], "properties": {"licence": False}},
    "dependentSchemas": {"score": {"if": {"properties": {"score": {"exclusiveMaximum": 0.5}}},
                                   "then": {"required": ["retest"]}}},
}
DEPLOY = {  # an `else` of `not: {required: [...]}` ("no min_available then"), which llguidance does not implement
    "type": "object",
    "properties": {"replicas": {"type": "integer"}, "min_available": {"type": "integer"}, "url": {"type": "string"}},
    "required": ["replicas"],
    "if": {"properties": {"replicas": {"minimum": 3}}, "required": ["replicas"]},
    "then": {"required": ["min_available", "url"]},
    "else": {"not": {"required": ["min_available"]}},
    "additionalProperties": False,
}
REVIEWED = {  # an `if` on a property of a property, whose schema is a `$ref`
    "$defs": {"money": {"type": "object", "properties": {"value_minor": {"type": "integer"}, "currency": {
        "enum": ["EUR", "USD"]}}, "required": ["value_minor"], "additionalProperties": False}},
    "type": "object",
    "properties": {"total": {"$ref": "#/$defs/money"}, "review": {"type": "boolean"}},
    "required": ["total"],
    "additionalProperties": False,
    "if": {"properties": {"total": {"properties": {"value_minor": {"minimum": 1000000}, "currency": {
        "const": "EUR"}}, "required": ["value_minor"]}}, "required": ["total"]},
    "then": {"required": ["review"]},
    "else": {"not": {"required": ["review"]}},
}
VALUES = {  # what each property may be given in the documents tried (None: left out)
    "method": ["card", "bank", "cash"], "card_number": ["4111"], "iban": ["DE89"], "amount": [5],
    "name": ["Sam"], "phone": ["555"], "email": ["s@x.org"], "prefers": ["phone", "email"],
    "express": [True, False], "country": ["DE", "US"], "courier": ["DHL"], "insured": [True, False], "value": [9],
    "a": [1], "b": [1, 2], "c": [1, 2], "kind": ["a", "b"], "size": [3],
    "replicas": [1, 3], "min_available": [2], "url": ["u"], "review": [True],
    "total": [{"value_minor": 5, "currency": "EUR"}, {"value_minor": 2000000, "currency": "EUR"},
               {"value_minor": 2000000, "currency": "USD"}, {"value_minor": 2000000}],
    "age": [5, 17, 18, 120, 121], "licence": ["B"], "guardian": ["Mum"], "score": [0.25, 0.5, 0.75], "retest": [True],
}


def documents(schema: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every object with each listed property left out or given each of its VALUES, in the listed order
    (the order llguidance writes them in)."""
    names = list(schema["properties"])
    for choice in itertools.product(*([None, *VALUES[name]] for name in names)):
        yield {name: value for name, value in zip(names, choice) if value is not None}


@pytest.mark.parametrize("schema", [PAYMENT, CONTACT, SHIPPING, DRAFT7, AGE, DEPLOY, REVIEWED], ids=[
    "if", "dependentRequired", "if-required-dependentSchemas", "draft7", "ranges", "else-not", "nested-ref"])
@pytest.mark.slow
def test_the_grammar_takes_exactly_the_objects_the_schema_validates(schema: dict[str, Any]) -> None:
    compiled = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    assert compiled.warnings == ()  # (was: "Unimplemented keys: [if, then, else]", ...)
    verdicts = [(jsonschema.Draft202012Validator(schema).is_valid(document)
                 if "dependencies" not in schema else jsonschema.Draft7Validator(schema).is_valid(document),
                 accepts(compiled.grammar, json.dumps(document)), document) for document in documents(schema)]
    assert any(valid for valid, _, _ in verdicts) and any(not valid for valid, _, _ in verdicts)
    assert [document for valid, taken, document in verdicts if valid != taken] == []


def test_a_conditional_inside_array_items_is_held_there() -> None:
    grammar = compile_format(OutputFormat("json_schema", json.dumps(NESTED), "s.json")).grammar
    item_documents = list(documents(NESTED["properties"]["items"]["items"]))
    for count in (1, 2):
        for chosen in itertools.product(item_documents, repeat=count):
            document = {"items": list(chosen)}
            assert accepts(grammar, json.dumps(document)) == jsonschema.Draft202012Validator(NESTED).is_valid(document)


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"kind": {"type": "string"}}, "if": {"properties": {"kind": {"const": "x"}}},
     "then": {"required": ["kind"]}},  # the other values of an open string cannot be listed
    {"type": "object", "properties": {"n": {"type": "integer"}}, "if": {"properties": {"n": {"multipleOf": 3}}},
     "then": {"required": ["n"]}},  # a condition other than listed values or a range
    {"type": "object", "properties": {"n": {"type": "number"}}, "if": {"properties": {"n": {"type": "integer",
     "minimum": 3}}}, "then": {"required": ["n"]}},  # a type the property may fail
    # bounds where a validator's floats and the grammar's exact reading part: 99999999.999999999 is 1e8 to the
    # first, below it to the second (written out, the `else` let it through without `approval`)
    {"type": "object", "properties": {"price": {"type": "number"}, "approval": {"type": "string"}},
     "if": {"properties": {"price": {"minimum": 100000000}}}, "then": {"required": ["approval"]}},
    {"type": "object", "properties": {"n": {"type": "integer"}}, "if": {"properties": {"n": {"maximum": 2**53 + 1}}},
     "then": {"required": ["n"]}},
    {"type": "object", "properties": {"n": {"type": "number"}}, "if": {"properties": {"n": {
        "exclusiveMinimum": 0.9999999999999999}}}, "then": {"required": ["n"]}},  # (1 to llguidance)
    {"type": "object", "if": {"type": "string"}, "then": {"required": ["a"]}},
    {"type": "object", "properties": {"a": {"enum": ["x", "y", "z"]}, "b": {"type": "integer"}},
     "if": {"properties": {"a": {"const": "x", "enum": ["y"]}}}, "then": {"required": ["b"]}},  # (const and enum)
])
def test_a_condition_whose_failing_cannot_be_written_stays_as_written_with_the_warning(schema: dict[str, Any]) -> None:
    assert conditionals_as_branches(schema) == schema
    warnings = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json")).warnings
    assert len(warnings) == 1 and '"if"' in warnings[0] and "not enforced" in warnings[0]


def test_refs_under_a_nested_id_are_not_followed_from_the_root() -> None:
    """Under an `$id`, `#/$defs/n` names the inner definitions: read from the root, the property was taken for an
    integer, its bound written out, and the grammar let through what a validator refuses."""
    inner = {"$id": "https://example.com/inner", "$defs": {"n": {"type": "number"}}, "type": "object",
             "properties": {"n": {"$ref": "#/$defs/n"}, "r": {"type": "boolean"}}, "required": ["n"],
             "if": {"properties": {"n": {"minimum": 123456789012346}}}, "then": {"required": ["r"]},
             "else": {"properties": {"r": False}}}
    schema = {"$defs": {"n": {"type": "integer"}}, "type": "object", "properties": {"o": inner}, "required": ["o"]}
    assert conditionals_as_branches(schema)["properties"]["o"]["if"] == inner["if"]  # left, with its warning
    warnings = compile_format(OutputFormat("json_schema", json.dumps(schema))).warnings
    assert any('"if"' in warning for warning in warnings)


def test_a_bound_past_any_float_is_one_line_not_a_traceback() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "b": {"type": "boolean"}},
              "if": {"properties": {"n": {"minimum": 10**400}}}, "then": {"required": ["b"]}}
    assert conditionals_as_branches(schema) == schema  # (was: OverflowError from math.isfinite)
    with pytest.raises(InputError, match="does not fit llguidance's 64-bit integers"):
        compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))


def test_an_if_without_then_or_else_is_dropped() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "if": {"required": ["a"]}}
    assert conditionals_as_branches(schema) == {"type": "object", "properties": {"a": {"type": "string"}}}


def test_the_input_schema_is_left_untouched_and_then_false_drops_its_case() -> None:
    schema = {"type": "object", "properties": {"on": {"type": "boolean"}, "why": {"type": "string"}},
              "if": {"properties": {"on": {"const": False}}, "required": ["on"]}, "then": False}
    before = json.dumps(schema)
    branched = conditionals_as_branches(schema)
    assert json.dumps(schema) == before
    grammar = compile_format(OutputFormat("json_schema", before, "s.json")).grammar
    absent = {"type": "object", "properties": {"on": False}}
    present_otherwise = {"type": "object", "required": ["on"], "properties": {"on": {"enum": [True]}}}
    assert branched["allOf"] == [{"$comment": CASES_COMMENT, "anyOf": [absent, present_otherwise]}]
    assert accepts(grammar, '{"on": true}') and accepts(grammar, '{"why": "x"}')
    assert not accepts(grammar, '{"on": false}')


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": 5, "if": {"properties": {"a": {"const": 1}}}, "then": {}},
    {"type": "object", "dependentRequired": {"a": [1]}},
    {"type": "object", "dependentSchemas": {"a": []}},
])
def test_malformed_conditionals_are_llguidances_to_report_never_an_exception(schema: dict[str, Any]) -> None:
    from localspec.errors import InputError

    try:
        compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    except InputError:
        pass  # (a one-line error naming the schema)


def test_a_typed_condition_is_held_and_a_dependency_on_a_property_not_listed_keeps_the_object_open() -> None:
    typed = {"type": "object", "properties": {"a": {"enum": [1, 2]}, "b": {"type": "string"}},
             "if": {"type": "object", "required": ["a"]}, "then": {"required": ["b"]}}
    compiled = compile_format(OutputFormat("json_schema", json.dumps(typed), "s.json"))
    assert compiled.warnings == () and accepts(compiled.grammar, "{}")
    assert not accepts(compiled.grammar, '{"a": 1}') and accepts(compiled.grammar, '{"a": 1, "b": "x"}')
    unlisted = {"type": "object", "properties": {"p": {"type": "integer", "minimum": 0, "maximum": 3}},
                "dependentRequired": {"p": ["r"]}}
    grammar = compile_format(OutputFormat("json_schema", json.dumps(unlisted), "s.json")).grammar
    assert accepts(grammar, '{"p": 1, "r": 2}') and not accepts(grammar, '{"p": 1}')


TAGS = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}


@pytest.mark.parametrize("schema", [
    {**PAYMENT, "properties": {**PAYMENT["properties"], "tags": TAGS}},
    {**CONTACT, "properties": {**CONTACT["properties"], "tags": TAGS}},
    {**DEPLOY, "properties": {**DEPLOY["properties"], "tags": TAGS}},  # (ranges and a `not`: were not held)
    {**REVIEWED, "properties": {**REVIEWED["properties"], "tags": TAGS}},
])
def test_unique_items_and_keys_are_still_held_in_an_object_with_conditionals(schema: dict[str, Any]) -> None:
    """The cases ask only which properties are present and which listed values they hold: the values are still
    placed by the object's own keywords, so the rule of unique items follows them (was: not held, and warned)."""
    compiled = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    assert compiled.warnings == ()
    from localspec.engine.unique_items import schema_of_grammar

    survey = survey_held(schema_of_grammar(compiled.grammar))
    assert (len(survey.held), survey.not_held) == (1, 0)


def test_an_object_whose_conditionals_speak_only_of_its_own_properties_is_closed() -> None:
    """Closed as an object without conditionals is (a small model invented keys until max_tokens in a tool's
    parameters with an `if`); not where a conditional names a property the object does not list."""
    own = {"type": "object", "properties": {"method": {"enum": ["card", "cash"]}, "card": {"type": "string"}},
           "required": ["method"], "if": {"properties": {"method": {"const": "card"}}}, "then": {"required": ["card"]}}
    grammar = compile_format(OutputFormat("json_schema", json.dumps(own), "s.json")).grammar
    assert accepts(grammar, '{"method": "card", "card": "1"}') and not accepts(grammar, '{"method": "card"}')
    assert not accepts(grammar, '{"method": "cash", "note": "x"}')  # (was: any other key, any number of them)
    other = {**own, "then": {"required": ["card", "pin"]}}  # (`pin` is not listed: closing would refuse it)
    grammar = compile_format(OutputFormat("json_schema", json.dumps(other), "s.json")).grammar
    assert accepts(grammar, '{"method": "card", "card": "1", "pin": 1}')
    assert accepts(grammar, '{"method": "cash", "x": 1}')
    depends = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
               "dependentSchemas": {"a": {"required": ["b"]}}}
    grammar = compile_format(OutputFormat("json_schema", json.dumps(depends), "s.json")).grammar
    assert accepts(grammar, '{"a": 1, "b": 2}')
    assert not accepts(grammar, '{"a": 1}') and not accepts(grammar, '{"c": 1}')


def test_an_untyped_value_in_a_conditionals_part_leaves_the_objects_own_schema_of_it() -> None:
    """`then: {properties: {o: {}}}` says nothing of `o`; made any JSON it narrowed the object's own schema of `o`,
    and a valid document was refused."""
    schema = {"type": "object", "properties": {"m": {"enum": ["x", "y"]},
                                               "o": {"type": "object", "properties": {"p": {"enum": [1, 2]}}}},
              "if": {"properties": {"m": {"const": "x"}}}, "then": {"properties": {"o": {}}}}
    grammar = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json")).grammar
    assert accepts(grammar, '{"m": "x", "o": {"p": 1}}')


def test_a_part_that_may_ask_for_other_keys_keeps_the_bounds_and_the_object_open() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "if": True, "then": {"minProperties": 2}}
    compiled = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    assert not any("do not fit" in warning for warning in compiled.warnings)

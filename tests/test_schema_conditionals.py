"""JSON Schema's conditionals (`if`/`then`/`else`, `dependentRequired`, `dependentSchemas`, `dependencies`)
held as branches: the compiled grammar lets through exactly the documents `jsonschema` validates."""

from __future__ import annotations

import itertools
import json
from typing import Any, Iterator

import jsonschema
import pytest

from localspec.engine.grammar import OutputFormat, compile_format
from localspec.engine.schema_conditionals import conditionals_as_branches

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
VALUES = {  # what each property may be given in the documents tried (None: left out)
    "method": ["card", "bank", "cash"], "card_number": ["4111"], "iban": ["DE89"], "amount": [5],
    "name": ["Sam"], "phone": ["555"], "email": ["s@x.org"], "prefers": ["phone", "email"],
    "express": [True, False], "country": ["DE", "US"], "courier": ["DHL"], "insured": [True, False], "value": [9],
    "a": [1], "b": [1, 2], "c": [1, 2], "kind": ["a", "b"], "size": [3],
}


def documents(schema: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every object with each listed property left out or given each of its VALUES, in the listed order
    (the order llguidance writes them in)."""
    names = list(schema["properties"])
    for choice in itertools.product(*([None, *VALUES[name]] for name in names)):
        yield {name: value for name, value in zip(names, choice) if value is not None}


def accepts(grammar: str, text: str) -> bool:
    from llguidance import LLMatcher

    from localspec.engine.grammar import _byte_tokenizer

    matcher = LLMatcher(_byte_tokenizer(), grammar)
    return matcher.consume_tokens(list(text.encode())) and not matcher.is_error() and matcher.is_accepting()


@pytest.mark.parametrize("schema", [PAYMENT, CONTACT, SHIPPING, DRAFT7], ids=["if", "dependentRequired",
                                                                          "if-required-dependentSchemas", "draft7"])
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
    {"type": "object", "properties": {"n": {"type": "integer"}}, "if": {"properties": {"n": {"minimum": 3}}},
     "then": {"required": ["n"]}},  # a condition other than listed values
    {"type": "object", "if": {"type": "string"}, "then": {"required": ["a"]}},
])
def test_a_condition_whose_failing_cannot_be_written_stays_as_written_with_the_warning(schema: dict[str, Any]) -> None:
    assert conditionals_as_branches(schema) == schema
    warnings = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json")).warnings
    assert len(warnings) == 1 and '"if"' in warnings[0] and "not enforced" in warnings[0]


def test_the_input_schema_is_left_untouched_and_then_false_drops_its_case() -> None:
    schema = {"type": "object", "properties": {"on": {"type": "boolean"}, "why": {"type": "string"}},
              "if": {"properties": {"on": {"const": False}}, "required": ["on"]}, "then": False}
    before = json.dumps(schema)
    branched = conditionals_as_branches(schema)
    assert json.dumps(schema) == before
    grammar = compile_format(OutputFormat("json_schema", before, "s.json")).grammar
    absent = {"type": "object", "properties": {"on": False}}
    present_otherwise = {"type": "object", "required": ["on"], "properties": {"on": {"enum": [True]}}}
    assert branched["allOf"] == [{"anyOf": [absent, present_otherwise]}]
    assert accepts(grammar, '{"on": true}') and accepts(grammar, '{"why": "x"}')
    assert not accepts(grammar, '{"on": false}')

"""`minProperties`/`maxProperties` over optional properties: held as cases where the object takes no other key,
left out with a note elsewhere; never a grammar that takes no object (llguidance's own, there)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import jsonschema
import pytest

from localspec.engine.grammar import OutputFormat, compile_format
from localspec.engine.schema_property_counts import property_counts_as_branches


def accepts(grammar: str, text: str) -> bool:
    from llguidance import LLMatcher

    from localspec.engine.grammar import _byte_tokenizer

    matcher = LLMatcher(_byte_tokenizer(), grammar)
    return matcher.consume_tokens(list(text.encode())) and not matcher.is_error() and matcher.is_accepting()


def counted(required: list[str], **counts: int) -> dict[str, Any]:
    return {"type": "object", "properties": {name: {"type": "integer"} for name in "abcd"}, "required": required,
            **counts}


@pytest.mark.parametrize("schema", [
    counted([], minProperties=2), counted(["a"], minProperties=3), counted([], maxProperties=1),
    counted(["a"], maxProperties=2), counted([], minProperties=1, maxProperties=2),
    counted(["a", "b"], minProperties=1),
])
def test_the_grammar_takes_exactly_the_objects_whose_count_the_schema_validates(schema: dict[str, Any]) -> None:
    compiled = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    assert compiled.warnings == ()  # (was: llguidance's warning, and no object taken at all)
    verdicts = []
    for present in itertools.product([False, True], repeat=4):
        document = {name: 1 for name, here in zip("abcd", present) if here}
        verdicts.append((jsonschema.Draft202012Validator(schema).is_valid(document),
                         accepts(compiled.grammar, json.dumps(document)), document))
    assert any(valid for valid, _, _ in verdicts)
    assert [document for valid, taken, document in verdicts if valid != taken] == []


@pytest.mark.parametrize("schema, why", [
    ({**counted([], minProperties=2), "additionalProperties": True}, "the object takes other keys"),
    (counted([], minProperties=5), "no object can meet it"),
    ({"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(12)}, "minProperties": 6},
     "number too many"),
])
def test_a_count_that_cannot_be_held_is_left_out_with_a_note_and_objects_can_be_written(schema: dict[str, Any],
                                                                                       why: str) -> None:
    compiled = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    assert len(compiled.warnings) == 1 and why in compiled.warnings[0] and "minProperties" in compiled.warnings[0]
    first = next(iter(schema["properties"]))
    assert accepts(compiled.grammar, json.dumps({first: 1}))  # (was: no object at all)


def test_the_input_is_left_untouched_and_counts_llguidance_holds_are_kept() -> None:
    schema = counted([], minProperties=2)
    before = json.dumps(schema)
    property_counts_as_branches(schema)
    assert json.dumps(schema) == before
    every = counted(list("abcd"), minProperties=2)
    assert property_counts_as_branches(every) == (every, [])

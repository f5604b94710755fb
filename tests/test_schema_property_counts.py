"""`minProperties`/`maxProperties` over optional properties: held as cases where the object takes no other key,
left out with a note elsewhere; never a grammar that takes no object (llguidance's own, there)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import jsonschema
import pytest
from grammar_helpers import accepts

from localspec.engine.grammar import OutputFormat, compile_format
from localspec.engine.schema_property_counts import property_counts_as_branches


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


def test_counts_llguidance_holds_or_finds_unsatisfiable_stay_its_own() -> None:
    """Only where llguidance says it cannot hold a count: 32 optional properties with minProperties 1 (which it
    holds) kept their bounds; minProperties above maxProperties is still refused as no object can meet it."""
    many = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(32)}, "minProperties": 1}
    compiled = compile_format(OutputFormat("json_schema", json.dumps(many), "s.json"))
    assert compiled.warnings == () and not accepts(compiled.grammar, "{}")
    assert accepts(compiled.grammar, '{"p3": "x"}')
    from localspec.errors import InputError

    for unmet in (counted([], minProperties=3, maxProperties=2), {**counted([], minProperties=5),
                                                                  "additionalProperties": False},
                  counted(["a", "b"], maxProperties=1)):
        with pytest.raises(InputError, match="Properties"):
            compile_format(OutputFormat("json_schema", json.dumps(unmet), "s"))


def test_cases_too_large_for_llguidance_are_left_out_and_objects_can_be_written() -> None:
    """23 optional properties, maxProperties 22: 23 cases of 22 names each left llguidance's parser no way past
    the first key."""
    schema = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(23)}, "maxProperties": 22}
    compiled = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    assert accepts(compiled.grammar, '{"p0": 1}') and accepts(compiled.grammar, "{}")


def test_a_tools_counts_left_out_are_said() -> None:
    from localspec.app.tool_calls import prepare_tools, tool_request

    parameters = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
                  "minProperties": 2, "additionalProperties": {"type": "integer"}}
    request = tool_request([{"type": "function", "function": {"name": "f", "parameters": parameters}}], "required")
    assert request is not None
    setup = prepare_tools(request, None, lambda text: False)
    assert any("minProperties 2 left out" in warning and "tools[0]" in warning for warning in setup.warnings)

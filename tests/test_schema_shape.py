"""A schema whose keyword has a value of the wrong kind is refused in one line naming it (engine/schema_shape.py)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from localspec.engine.grammar import OutputFormat, compile_format
from localspec.engine.schema_shape import misshapen
from localspec.errors import InputError


@pytest.mark.parametrize("schema, said", [
    ({"not": 5}, "`not` must be a schema (an object, or true or false), not 5"),
    ({"if": "x", "then": {}}, "`if` must be a schema"),
    ({"type": "array", "contains": 5}, "`contains` must be a schema"),
    ({"type": "array", "minContains": -1}, "`minContains` must be a count (an integer, 0 or more), not -1"),
    ({"type": "array", "minContains": 1.5}, "`minContains` must be a count"),
    ({"maxContains": "x"}, '`maxContains` must be a count (an integer, 0 or more), not "x"'),
    ({"uniqueItems": "yes"}, '`uniqueItems` must be true or false, not "yes"'),
    ({"type": "object", "propertyNames": 5}, "`propertyNames` must be a schema"),
    ({"dependentRequired": {"a": "b"}}, "`dependentRequired` must be an object of lists of property names"),
    ({"dependentSchemas": {"a": 5}}, "`dependentSchemas` must be an object whose values are schemas"),
    ({"$defs": 5}, "`$defs` must be an object whose values are schemas, not 5"),
    ({"type": "integer", "multipleOf": -3}, "`multipleOf` must be a number above 0, not -3"),
    ({"anyOf": []}, "`anyOf` must be a non-empty list of schemas, not []"),
    ({"type": "object", "properties": {"tags": {"type": "array", "items": {"maxLength": -2}}}},
     "`maxLength` must be a count (an integer, 0 or more), not -2 (at #/properties/tags/items)"),
    ({"$defs": {"a/b": {"type": ["string", "text"]}}}, '`type` must be a type name or a list of them'),
])
def test_a_keyword_of_the_wrong_kind_is_refused_naming_it_and_where_it_is(schema: dict[str, Any], said: str) -> None:
    assert said in (misshapen(schema) or "")
    with pytest.raises(InputError, match=f"^s.json: {re.escape(said)}"):
        compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"not": {"type": "string"}, "required": {"type": "boolean"}}},  # (names)
    {"type": "array", "items": [{"type": "string"}], "minItems": 1.0},  # (draft 7's items; 1.0 is an integer)
    {"type": "number", "minimum": 0, "exclusiveMinimum": True},  # (draft 4's exclusive bound)
    {"not": False, "enum": [1, "a"], "dependencies": {"a": ["b"], "b": {"required": ["a"]}}},
    {"$defs": {"a~b": {"type": ["string", "null"]}}, "$ref": "#/$defs/a~0b"},
])
def test_well_formed_schemas_pass(schema: dict[str, Any]) -> None:
    assert misshapen(schema) is None

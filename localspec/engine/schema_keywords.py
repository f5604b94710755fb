"""JSON Schema's keywords by what their values hold: data, a schema, or a map of names to schemas; and the
JSON types a value belongs to.

Shared by the code that bounds a schema (grammar.py) and the code that follows one
while JSON is written (unique_items.py): a property named `enum` or `uniqueItems`
is a name, not a keyword, and `enum`'s values are data, not schemas.
"""

from __future__ import annotations

from typing import Any, Iterator

# The bounds localspec puts on a number a schema leaves open (see grammar.py, where they are put): at most
# WHOLE_DIGITS digits before the point and FRACTION_DIGITS after it, as llguidance then writes it (no exponent).
WHOLE_DIGITS, FRACTION_DIGITS = 15, 9
NUMBER_MAGNITUDE_LIMIT = 10**WHOLE_DIGITS
NUMBER_STEP = 10.0**-FRACTION_DIGITS

DATA_KEYWORDS = {"const", "enum", "default", "examples", "required", "dependentRequired"}  # their values are data
SCHEMA_MAPS = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}  # names to schemas


def schemas_in(schema: Any) -> list[dict[str, Any]]:
    """`schema` and every schema inside it, found by keyword (see `subschemas`)."""
    if isinstance(schema, list):
        return [node for item in schema for node in schemas_in(item)]
    if not isinstance(schema, dict):
        return []
    return [schema, *(node for child in subschemas(schema) for node in schemas_in(child))]


def subschemas(schema: dict[str, Any], skipping: frozenset[str] = frozenset()) -> Iterator[Any]:
    """The values of `schema`'s keywords that hold schemas (or lists of them), but those in `skipping`: not data
    (`enum`, `required`), and in maps of names to schemas (`properties`), the schemas, not the names."""
    for key, value in schema.items():
        if key in skipping:
            continue
        if key in SCHEMA_MAPS and isinstance(value, dict):
            yield from value.values()
        elif key not in DATA_KEYWORDS:
            yield value


def json_types(value: Any) -> set[str]:
    """The JSON types a parsed JSON value belongs to (a whole number, 2 or 2.0, is both integer and number)."""
    if value is None:
        return {"null"}
    if isinstance(value, bool):
        return {"boolean"}
    if isinstance(value, (int, float)):
        whole = isinstance(value, int) or value.is_integer()
        return {"integer", "number"} if whole else {"number"}
    return {{str: "string", list: "array", dict: "object"}.get(type(value), "")}


def is_count(value: Any) -> bool:
    """Whether `value` is what a schema's counts (`maxLength`, `minItems`, ...) must be: an integer, not negative."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0

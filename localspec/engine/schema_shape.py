"""A JSON schema's keywords checked for the kind of value each must have, before anything else reads it.

llguidance reads a keyword it implements and warns of one it does not; given a value of the wrong kind
(`"not": 5`, `"minContains": -1`, `"uniqueItems": "yes"`, `"multipleOf": -3`), it says "Unimplemented keys" of
some, refuses others, and localspec's own rewriting would skip them: a schema a validator rejects as invalid was
taken with a warning that said otherwise. `misshapen` finds the first keyword whose value is of the wrong kind,
as JSON Schema (2020-12, and draft 7's forms: `items` as a list, `dependencies`, `definitions`) defines them,
so that the schema is refused with one line naming it.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from .schema_keywords import SCHEMA_MAPS, pointer_escaped

_TYPES = ("null", "boolean", "object", "array", "number", "string", "integer")


def _schema(value: Any) -> bool:
    return isinstance(value, (dict, bool))


def _count(value: Any) -> bool:
    """An integer, 0 or more (`2.0` too: JSON Schema counts a number whose fraction is zero as an integer)."""
    return _number(value) and value >= 0 and (isinstance(value, int) or value.is_integer())


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _type(value: Any) -> bool:
    names = value if isinstance(value, list) else [value]
    return bool(names) and all(isinstance(name, str) and name in _TYPES for name in names)


# Each keyword's check, and what its value must be (for the message).
_VALUE_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    **{key: (_count, "a count (an integer, 0 or more)") for key in (
        "minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties", "minContains",
        "maxContains")},
    **{key: (_number, "a number") for key in ("minimum", "maximum")},
    # (draft 4 wrote the exclusive bounds as booleans beside minimum and maximum)
    **{key: (lambda value: _number(value) or isinstance(value, bool), "a number")
       for key in ("exclusiveMinimum", "exclusiveMaximum")},
    "multipleOf": (lambda value: _number(value) and value > 0, "a number above 0"),
    "uniqueItems": (lambda value: isinstance(value, bool), "true or false"),
    "required": (_strings, "a list of property names"),
    "enum": (lambda value: isinstance(value, list), "a list of values"),
    "type": (_type, f"a type name or a list of them ({', '.join(_TYPES)})"),
    "pattern": (lambda value: isinstance(value, str), "a regular expression (a string)"),
    "format": (lambda value: isinstance(value, str), "a format's name (a string)"),
    "$ref": (lambda value: isinstance(value, str), "a reference (a string)"),
    "dependentRequired": (lambda value: isinstance(value, dict) and all(_strings(names) for names in value.values()),
                          "an object of lists of property names"),
}
_SCHEMA_KEYWORDS = ("not", "if", "then", "else", "contains", "propertyNames", "additionalProperties",
                    "additionalItems", "unevaluatedProperties", "unevaluatedItems")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")


def misshapen(schema: Any) -> str | None:
    """The first keyword in `schema` (at any depth) whose value is of a kind JSON Schema does not allow there, said
    in one line with where it is (`at #/properties/tags`); None where every one is of its kind."""
    return _misshapen(schema, "#")


def _misshapen(schema: Any, at: str) -> str | None:
    if not isinstance(schema, dict):
        return None
    for key, value in schema.items():
        if not isinstance(key, str):
            continue
        where = f"{at}/{pointer_escaped(key)}"
        if key in _VALUE_RULES:
            takes, kind = _VALUE_RULES[key]
            if not takes(value):
                return _said(key, kind, value, at)
        elif key in _SCHEMA_KEYWORDS and not _schema(value):
            return _said(key, "a schema (an object, or true or false)", value, at)
        elif key in _SCHEMA_LISTS and not (isinstance(value, list) and value and all(map(_schema, value))):
            return _said(key, "a non-empty list of schemas", value, at)
        elif key in SCHEMA_MAPS and not (isinstance(value, dict) and all(map(_schema, value.values()))):
            return _said(key, "an object whose values are schemas", value, at)
        elif key == "items" and not (_schema(value) or (isinstance(value, list) and all(map(_schema, value)))):
            return _said(key, "a schema (or, as draft 7 wrote it, a list of schemas)", value, at)
        elif key == "dependencies" and not (isinstance(value, dict)
                                            and all(_schema(need) or _strings(need) for need in value.values())):
            return _said(key, "an object of schemas or lists of property names", value, at)
        found = _inside(key, value, where)
        if found is not None:
            return found
    return None


def _inside(key: str, value: Any, where: str) -> str | None:
    """The first misshapen keyword in the schemas a keyword's value holds."""
    if key in _SCHEMA_KEYWORDS or key == "items" and not isinstance(value, list):
        return _misshapen(value, where)
    if key in _SCHEMA_LISTS or key == "items":
        return next(filter(None, (_misshapen(item, f"{where}/{index}") for index, item in enumerate(value))), None)
    if key in SCHEMA_MAPS or key == "dependencies":
        return next(filter(None, (_misshapen(item, f"{where}/{pointer_escaped(name)}")
                                  for name, item in value.items())), None)
    return None


def _said(key: str, kind: str, value: Any, at: str) -> str:
    place = "" if at == "#" else f" (at {at})"
    return f"`{key}` must be {kind}, not {_shown(value)}{place}"


def _shown(value: Any) -> str:
    """`value` as JSON writes it where short (`true`, `"yes"`, `-1`); else the kind of value it is."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        text = ""
    if text and len(text) <= 40:
        return text
    return {dict: "an object", list: "a list", str: "a long string"}.get(type(value), "a number")
